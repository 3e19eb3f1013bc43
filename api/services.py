"""What a request needs, held by the app (not by module globals), and its one DB session."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from quart import Response, current_app, g, request
from sqlalchemy.ext.asyncio import AsyncSession

from api.ratelimit import RateLimiter
from api.usage import UsageRecorder
from core.auth_cache import ApiKeyCache
from core.bus import Bus, Listening
from core.db import Database
from core.settings import Settings

if TYPE_CHECKING:
    from api.status_cache import StatusCache

_SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})


@dataclass
class Services:
    settings: Settings
    bus: Bus
    db: Database
    # API key uses, counted per process and written in batches (api/usage.py).
    usage: UsageRecorder
    # Requests per key (api/ratelimit.py): in process, or shared through Redis when configured.
    rate_limiter: RateLimiter
    # Per-process caches of API keys and status records, kept current over the bus (api/status_cache.py).
    auth_cache: ApiKeyCache
    status_cache: StatusCache
    cache_listening: Listening


def services() -> Services:
    found: Services = current_app.extensions["vouch"]
    return found


def db_session() -> AsyncSession:
    """The request's session, opened on first use; committed once, after the view succeeds."""
    session: AsyncSession | None = g.get("db_session")
    if session is None:
        session = services().db.session(write=request.method not in _SAFE_METHODS)
        g.db_session = session
    return session


async def commit_request_session(response: Response) -> Response:
    session: AsyncSession | None = g.get("db_session")
    if session is not None and session.in_transaction():
        if response.status_code < 400:
            await services().db.commit(session)
        else:
            await session.rollback()
    return response


async def close_request_session(_exc: BaseException | None) -> None:
    session: AsyncSession | None = g.pop("db_session", None)
    if session is not None:
        await session.close()
