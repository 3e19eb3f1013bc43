"""A new API key's secret, shown once on the page after the form (post, redirect, get).

The form that creates a key answers with a redirect, so a reload or a back-and-forward never makes a second key.
The page it redirects to must show the secret exactly once, yet the secret may travel in no URL and sit in no
session: it is split in two. The browser gets a one-time pad (a random string as long as the secret, in a
short-lived cookie); the key's row gets the secret XORed with that pad (`api_keys.sealed_secret`). Either half
alone is noise. The first showing clears the row's half, so a reload finds nothing to show and says so.
"""

from __future__ import annotations

import base64
import secrets
from datetime import timedelta

import sqlalchemy as sa
from quart import Response

from core.models import ApiKey
from core.web.services import services
from core.web.sessions import clear_cookie, read_cookie, set_cookie

PAD_COOKIE = "__Host-vouch_new_key"
# Only the redirect that follows the form needs the pad.
PAD_LIFETIME = timedelta(minutes=10)


def _xor(data: bytes, pad: bytes) -> bytes:
    return bytes(a ^ b for a, b in zip(data, pad, strict=True))


def seal(key: ApiKey, secret: str, response: Response) -> None:
    """Keep `secret` for one showing: its sealed half on the row, the pad in the browser."""
    raw = secret.encode()
    pad = secrets.token_bytes(len(raw))
    key.sealed_secret = base64.urlsafe_b64encode(_xor(raw, pad)).decode()
    set_cookie(response, PAD_COOKIE, base64.urlsafe_b64encode(pad).decode(), PAD_LIFETIME)


async def unseal(key: ApiKey, response: Response) -> str | None:
    """The secret, the first time this browser asks; None ever after (or in another browser). The row's half is
    cleared in a transaction of its own (the page is a GET, whose request session only reads), and only the
    request whose update cleared it shows the secret: two tabs racing get it once between them."""
    clear_cookie(response, PAD_COOKIE)
    sealed, pad_text = key.sealed_secret, read_cookie(PAD_COOKIE)
    if sealed is None:
        return None
    async with services().db.transaction() as writer:
        taken = await writer.execute(
            sa.update(ApiKey).where(ApiKey.id == key.id, ApiKey.sealed_secret == sealed).values(sealed_secret=None)
        )
    if getattr(taken, "rowcount", 0) != 1 or not pad_text:
        return None
    try:
        pad = base64.urlsafe_b64decode(pad_text.encode())
        return _xor(base64.urlsafe_b64decode(sealed.encode()), pad).decode("ascii")
    except (ValueError, UnicodeDecodeError):  # a pad of another length, or not this key's: nothing to show
        return None
