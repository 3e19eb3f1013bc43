"""What a request needs, held by the app (not by module globals), and its one DB session.

Every package's pages stand on this; the API's own per-process parts (rate limits, key caches) extend it in
api/app_services.py, so nothing here imports upward."""

from __future__ import annotations

from dataclasses import dataclass

from quart import Response, current_app, g, request
from sqlalchemy.ext.asyncio import AsyncSession

from core.bus import Bus
from core.db import Database
from core.settings import Settings

_SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})


@dataclass
class Services:
    settings: Settings
    bus: Bus
    db: Database


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
