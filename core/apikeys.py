"""The API key format of spec §2.4 and §5: `svc_eval_` + 32 base62 characters, 41 in all.

The last 6 characters are a checksum of the first 26, so a mistyped or invented key is
refused before any database read. Only an HMAC-SHA256 of the key under the server secret
is stored; the key itself is shown once.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import zlib

PREFIX = "svc_eval_"
KEY_LENGTH = 41
_BODY = 26
_CHECK = 6
_BASE62 = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"

SCOPES = ("eval:create", "eval:read", "eval:manage")
# eval:manage is "full access: create, read, update and delete".
_IMPLIED = {"eval:manage": frozenset(SCOPES)}


def _checksum(body: str) -> str:
    value = zlib.crc32(body.encode())
    out = []
    for _ in range(_CHECK):
        value, rem = divmod(value, 62)
        out.append(_BASE62[rem])
    return "".join(reversed(out))


def generate_key() -> str:
    body = "".join(secrets.choice(_BASE62) for _ in range(_BODY))
    return PREFIX + body + _checksum(body)


def is_well_formed(key: str) -> bool:
    if len(key) != KEY_LENGTH or not key.startswith(PREFIX):
        return False
    rest = key[len(PREFIX) :]
    if any(ch not in _BASE62 for ch in rest):
        return False
    return hmac.compare_digest(_checksum(rest[:_BODY]), rest[_BODY:])


def key_digest(key: str, secret: bytes) -> str:
    return hmac.new(secret, key.encode(), hashlib.sha256).hexdigest()


def display_hint(key: str) -> str:
    """What the key list shows: the fixed prefix and the last 4 characters."""
    return f"{PREFIX}…{key[-4:]}"


def effective_scopes(scopes: frozenset[str] | set[str] | list[str]) -> frozenset[str]:
    granted: set[str] = set(scopes)
    for scope in scopes:
        granted |= _IMPLIED.get(scope, frozenset())
    return frozenset(granted)
