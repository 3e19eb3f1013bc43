"""Watching an execution's chat with an API key: the Python client and `vouch tasks watch` follow a run this way.

A socket may connect with `Authorization: Bearer <API key>` (or `auth = {apiKey}`) instead of a view token or a
session cookie. The key must be active and hold eval:read. Only its id is kept in the socket's session, and every
join checks the key again (revoked or expired keys stop there) and that the execution belongs to the key's user,
as the REST API's status route does. A key watches; it never decides through the socket (decisions go through
the REST API, which applies its own scope and reviewer rules).
"""

from __future__ import annotations

from typing import Any

from sqlalchemy.ext.asyncio import AsyncSession

from chat.access import Access
from core import apikeys
from core.accounts import api_key_by_secret, enabled_users_key, key_state
from core.models import ApiKey, Execution, utcnow

READ_SCOPE = "eval:read"


def presented_key(environ: dict[str, Any], auth: Any) -> str | None:
    """The API key a handshake carries, in the Authorization header or in the Socket.IO auth object."""
    if isinstance(auth, dict) and isinstance(auth.get("apiKey"), str):
        return str(auth["apiKey"])
    scheme, _, secret = str(environ.get("HTTP_AUTHORIZATION") or "").partition(" ")
    if scheme.lower() == "bearer" and secret.strip():
        return secret.strip()
    return None


def _usable(key: ApiKey | None) -> bool:
    return (
        key is not None
        and key_state(key, utcnow()) == "active"
        and READ_SCOPE in apikeys.effective_scopes(key.scopes)
    )


async def key_id_for(session: AsyncSession, secret: str, secret_key: bytes) -> str | None:
    """The id of a usable key with this secret, or None."""
    key = await api_key_by_secret(session, secret, secret_key)
    return key.id if key is not None and _usable(key) else None


async def key_access(session: AsyncSession, key_id: str, execution_id: str) -> Access | None:
    """View-only access for the key's own user's execution; None when the key no longer works or it is not theirs."""
    key = await enabled_users_key(session, key_id)
    if key is None or not _usable(key) or len(execution_id) > 64:
        return None
    execution = await session.get(Execution, execution_id)
    if execution is None or execution.user_id != key.user_id:
        return None
    return Access(execution, True, None, via_session=False)
