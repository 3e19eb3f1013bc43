"""Checking a webhook from Vouch: Standard Webhooks signatures (https://www.standardwebhooks.com/).

Vouch signs each delivery with the endpoint's secret `whsec_<base64 key>`:

    webhook-id: msg_…            the delivery's id (the same on every retry: use it to drop duplicates)
    webhook-timestamp: 1700000000 seconds since the epoch, when it was signed
    webhook-signature: v1,<base64 HMAC-SHA256 over "<id>.<timestamp>.<body>">

Several signatures, space-separated, may be present (while a secret is being rotated): one match is enough.
A timestamp more than five minutes from now is refused, so a captured delivery cannot be replayed later.
Verify the raw body bytes as received: parsing and re-serialising JSON changes them.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import time
from collections.abc import Mapping
from typing import Any

from vouch_client.errors import VouchError

TOLERANCE_SECONDS = 5 * 60
SECRET_PREFIX = "whsec_"


class WebhookVerificationError(VouchError):
    """The delivery is not signed by the secret, is malformed, or its timestamp is outside the tolerance."""


def _secret_bytes(secret: str) -> bytes:
    try:
        return base64.b64decode(secret.removeprefix(SECRET_PREFIX), validate=True)
    except (binascii.Error, ValueError):
        raise WebhookVerificationError("the secret is not whsec_<base64>") from None


def sign(payload: bytes, msg_id: str, timestamp: int, secret: str) -> str:
    """The `v1,<signature>` of a delivery (what Vouch sends; useful in a receiver's tests)."""
    signed = f"{msg_id}.{timestamp}.".encode() + payload
    digest = hmac.new(_secret_bytes(secret), signed, hashlib.sha256).digest()
    return "v1," + base64.b64encode(digest).decode()


def verify_webhook(
    payload: bytes | str,
    headers: Mapping[str, str],
    secret: str,
    *,
    now: float | None = None,
    tolerance: int = TOLERANCE_SECONDS,
) -> Any:
    """The delivery's JSON body once its signature and timestamp check out; else WebhookVerificationError."""
    body = payload.encode() if isinstance(payload, str) else bytes(payload)
    lowered = {name.lower(): value for name, value in headers.items()}
    msg_id = lowered.get("webhook-id")
    stamp = lowered.get("webhook-timestamp")
    signatures = lowered.get("webhook-signature")
    if not msg_id or not stamp or not signatures:
        raise WebhookVerificationError("missing webhook-id, webhook-timestamp or webhook-signature")
    try:
        timestamp = int(stamp)
    except ValueError:
        raise WebhookVerificationError("webhook-timestamp is not a whole number of seconds") from None
    skew = (time.time() if now is None else now) - timestamp
    if skew > tolerance:
        raise WebhookVerificationError("the delivery's timestamp is too old")
    if skew < -tolerance:
        raise WebhookVerificationError("the delivery's timestamp is in the future")
    expected = sign(body, msg_id, timestamp, secret).encode()
    # Compare against every v1 signature, each in constant time, and do not stop at the first match.
    matched = False
    for candidate in signatures.split():
        if candidate.startswith("v1,"):
            matched |= hmac.compare_digest(candidate.encode(), expected)
    if not matched:
        raise WebhookVerificationError("no signature matches")
    try:
        return json.loads(body)
    except (json.JSONDecodeError, UnicodeDecodeError):
        raise WebhookVerificationError("the body is not JSON") from None
