"""verify_webhook: Standard Webhooks signatures, checked against a reference signer (the standardwebhooks package)."""

from __future__ import annotations

import base64
import json
import time
from datetime import UTC, datetime

import pytest
from standardwebhooks.webhooks import Webhook
from vouch_client import WebhookVerificationError, verify_webhook
from vouch_client.webhooks import sign

SECRET = "whsec_" + base64.b64encode(b"0123456789abcdef0123456789abcdef").decode()
OTHER = "whsec_" + base64.b64encode(b"another secret, another endpoint").decode()
BODY = json.dumps({"type": "execution.completed", "data": {"executionId": "exe_1", "status": "completed"}}).encode()


def _headers(secret: str = SECRET, *, at: float | None = None, msg_id: str = "msg_1") -> dict[str, str]:
    moment = datetime.fromtimestamp(at if at is not None else time.time(), tz=UTC)
    signature = Webhook(secret).sign(msg_id, moment, BODY.decode())
    return {"webhook-id": msg_id, "webhook-timestamp": str(int(moment.timestamp())), "webhook-signature": signature}


def test_a_good_delivery_gives_its_body() -> None:
    assert verify_webhook(BODY, _headers(), SECRET)["data"]["executionId"] == "exe_1"
    # Header names in any case, the body as text: the same.
    upper = {name.title(): value for name, value in _headers().items()}
    assert verify_webhook(BODY.decode(), upper, SECRET)["type"] == "execution.completed"


def test_our_signature_is_the_standard_one() -> None:
    now = int(time.time())
    assert sign(BODY, "msg_9", now, SECRET) == _headers(at=now, msg_id="msg_9")["webhook-signature"]


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        ({"webhook-signature": "v1," + base64.b64encode(b"x" * 32).decode()}, "no signature matches"),
        ({"webhook-id": "msg_other"}, "no signature matches"),
        ({"webhook-signature": ""}, "missing"),
        ({"webhook-timestamp": "soon"}, "whole number"),
    ],
)
def test_a_bad_delivery_is_refused(change: dict[str, str], reason: str) -> None:
    with pytest.raises(WebhookVerificationError, match=reason):
        verify_webhook(BODY, {**_headers(), **change}, SECRET)


def test_another_secret_or_a_changed_body_is_refused() -> None:
    with pytest.raises(WebhookVerificationError):
        verify_webhook(BODY, _headers(OTHER), SECRET)
    with pytest.raises(WebhookVerificationError):
        verify_webhook(BODY.replace(b"completed", b"failed"), _headers(), SECRET)


def test_expired_and_future_timestamps_are_refused() -> None:
    with pytest.raises(WebhookVerificationError, match="too old"):
        verify_webhook(BODY, _headers(at=time.time() - 301), SECRET)
    with pytest.raises(WebhookVerificationError, match="future"):
        verify_webhook(BODY, _headers(at=time.time() + 301), SECRET)
    assert verify_webhook(BODY, _headers(at=time.time() - 290), SECRET)


def test_any_of_several_signatures_may_match() -> None:
    good = _headers()
    rotated = _headers(OTHER)["webhook-signature"]
    several = {**good, "webhook-signature": f"v1a,ignored {rotated} {good['webhook-signature']}"}
    assert verify_webhook(BODY, several, SECRET)["data"]["status"] == "completed"
    assert verify_webhook(BODY, several, OTHER)
    with pytest.raises(WebhookVerificationError):
        verify_webhook(BODY, {**good, "webhook-signature": rotated}, SECRET)
