"""Opaque page cursors: a signed (createdAt, id) position for newest-first lists, a signed index for lists in a
fixed order (a suite's runs).

Keyset pagination over (created_at DESC, id DESC) stays stable while rows are inserted:
new rows sort before any cursor already handed out, so later pages neither repeat nor
skip a row. The signature makes a cursor opaque and tamper-evident without storing it.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
from dataclasses import dataclass
from datetime import UTC, datetime

from api.problems import ApiError

_SIGNATURE_BYTES = 12


@dataclass(frozen=True)
class Position:
    created_at: datetime
    id: str


def _signature(secret_key: bytes, payload: bytes) -> bytes:
    return hmac.new(secret_key, b"page-cursor:" + payload, hashlib.sha256).digest()[:_SIGNATURE_BYTES]


def encode_cursor(secret_key: bytes, position: Position) -> str:
    payload = json.dumps([position.created_at.astimezone(UTC).isoformat(), position.id], separators=(",", ":"))
    raw = payload.encode()
    return base64.urlsafe_b64encode(_signature(secret_key, raw) + raw).decode().rstrip("=")


def decode_cursor(secret_key: bytes, cursor: str) -> Position:
    """The position a cursor names; 400 if it was not made by us (or was altered)."""
    try:
        blob = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        signature, raw = blob[:_SIGNATURE_BYTES], blob[_SIGNATURE_BYTES:]
        if not hmac.compare_digest(signature, _signature(secret_key, raw)):
            raise ValueError("bad signature")
        created_at, id_ = json.loads(raw)
        moment = datetime.fromisoformat(created_at)
        if moment.tzinfo is None or not isinstance(id_, str):
            raise ValueError("bad position")
        return Position(moment.astimezone(UTC), id_)
    except (ValueError, TypeError):
        raise _invalid_cursor() from None


def _invalid_cursor() -> ApiError:
    return ApiError(
        400,
        "invalid_cursor",
        "cursor is not one this service handed out; start again without it",
        errors=[{"parameter": "cursor", "detail": "not a valid cursor"}],
    )


def encode_index_cursor(secret_key: bytes, scope: str, index: int) -> str:
    """A cursor after the item at `index` of an ordered list (a suite's runs by position), good for `scope` only."""
    raw = json.dumps(["index", scope, index], separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(_signature(secret_key, raw) + raw).decode().rstrip("=")


def decode_index_cursor(secret_key: bytes, scope: str, cursor: str) -> int:
    """The index a cursor from `encode_index_cursor` names; 400 if it was not made by us for this `scope`."""
    try:
        blob = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        signature, raw = blob[:_SIGNATURE_BYTES], blob[_SIGNATURE_BYTES:]
        if not hmac.compare_digest(signature, _signature(secret_key, raw)):
            raise ValueError("bad signature")
        kind, found_scope, index = json.loads(raw)
        if kind != "index" or found_scope != scope or not isinstance(index, int) or isinstance(index, bool):
            raise ValueError("bad position")
        return index
    except (ValueError, TypeError):
        raise _invalid_cursor() from None
