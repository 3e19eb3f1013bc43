"""The per-process API-key cache: what authentication needs, keyed by the key's HMAC digest.

Every API request authenticates; without this cache that is one database query before the request does anything.
An entry holds the key's id, owner (id and e-mail), scopes, expiry and revocation time, keyed by the digest the
database stores (`core.apikeys.key_digest`), never by the secret itself. Expiry and revocation are still judged
against the clock on every request (api/auth.py); only the rows are cached.

Staleness contract: anything that revokes a key, changes its scopes or changes/disables/deletes its owner calls
`core.accounts.invalidate_api_keys_after_commit` in its transaction. After the commit the invalidation goes out
on the bus (`CACHE_CHANNEL`): the committing process drops the entry before its request answers, every other
web process one bus hop later. A writer that is not on this bus (the `vouch` CLI beside a running `vouch serve`,
whose bus is in-process), or a web process that lost Redis, sees the change at most `ttl` seconds late
(VOUCH_AUTH_CACHE_SECONDS). While a web process's bus listener is down it caches nothing.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from core import apikeys
from core.accounts import api_key_and_email_by_digest, key_state
from core.cache import InvalidatingCache
from core.db import Database

MAX_KEYS = 10_000
# A key in use is read again in the background once four fifths of its entry's life have passed
# (core/cache.py `refresh_ahead`): no request waits for its key's row while the key is in steady use.
REFRESH_AHEAD = 0.2


@dataclass(frozen=True)
class KnownKey:
    """What authentication needs of an API key row and its owner."""

    key_id: str
    user_id: str
    email: str
    scopes: frozenset[str]
    expires_at: datetime | None
    revoked_at: datetime | None

    def state(self, now: datetime) -> str:
        """Revoked, expired or active, against the clock of this request."""
        return key_state(self, now)


class ApiKeyCache:
    def __init__(self, ttl: float, max_entries: int = MAX_KEYS) -> None:
        self.entries: InvalidatingCache[str, KnownKey] = InvalidatingCache(
            ttl, max_entries, refresh_ahead=REFRESH_AHEAD
        )

    async def find(self, secret: str, secret_key: bytes, db: Database) -> KnownKey | None:
        """The key a presented secret names, from the cache or the database; None for a look-alike or an unknown
        key (not cached: a key that does not exist is not a hot path).

        The database is read apart from the request's own session (`Database.reading`), which stays untouched for
        the request: a decision or a create whose statement commits by itself (core.db.commits_alone) still does
        after a miss (issue 25: each entry's expiry sent one approval in `VOUCH_AUTH_CACHE_SECONDS` the long way,
        in a transaction). The same read refreshes an entry in use before it expires (`REFRESH_AHEAD`)."""
        if not apikeys.is_well_formed(secret):
            return None
        digest = apikeys.key_digest(secret, secret_key)

        async def read() -> KnownKey | None:
            async with db.reading() as session:
                found = await api_key_and_email_by_digest(session, digest)
            if found is None:
                return None
            key, email = found
            return KnownKey(
                key.id, key.user_id, email, apikeys.effective_scopes(key.scopes), key.expires_at, key.revoked_at
            )

        return await self.entries.get_or_fill(digest, read)

    def on_message(self, message: dict[str, Any]) -> None:
        keys, users = set(message.get("apiKeys") or ()), set(message.get("users") or ())
        if keys or users:
            self.entries.invalidate_where(lambda _digest, known: known.key_id in keys or known.user_id in users)

    def clear(self) -> None:
        self.entries.clear()

    async def close(self) -> None:
        await self.entries.close()
