"""The engine of a database URL: JSON through orjson, SQLite as core/sqlite.py runs it, and a PostgreSQL pool whose
connections are pinged only when they idled."""

from __future__ import annotations

import time
from typing import Any

from sqlalchemy import event, exc
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine
from sqlalchemy.pool import ConnectionPoolEntry

from core import jsontext
from core.sqlite import make_sqlite_engine

# A pooled connection unused for this long is pinged before it is handed out.
IDLE_PING_SECONDS = 2.0
RETURNED_AT = "vouch_returned_at"
# Set on a connection kept out of the pool while it idled (`Database.keeping_alone`): since when.
IDLE_SINCE = "vouch_idle_since"


def make_engine(url: str, **kwargs: Any) -> AsyncEngine:
    # JSON columns written and read through orjson (core/jsontext.py).
    kwargs = {"json_serializer": jsontext.dumps, "json_deserializer": jsontext.loads, **kwargs}
    if url.startswith("sqlite"):
        return make_sqlite_engine(url, **kwargs)
    # Last in, first out: at the usual concurrency the same few connections serve every request, their
    # statements prepared and past PostgreSQL's first custom plans (about a millisecond of planning each for the
    # decision's and the step's statements), where first in, first out warmed every connection of the pool in
    # turn (bench/README.md, issue 25). The connections left idle are the ones pinged before reuse.
    engine = create_async_engine(url, pool_size=10, max_overflow=20, pool_use_lifo=True, **kwargs)
    _ping_idle_connections(engine)
    return engine


def _ping_idle_connections(engine: AsyncEngine) -> None:
    """Find connections that died while idle (a database restart, a dropped link) before a transaction does.

    SQLAlchemy's pool_pre_ping pings on every checkout; with asyncpg a ping is BEGIN, a query and ROLLBACK,
    three round trips before every transaction, about a third of an agent step (bench/README.md). A connection
    back from a transaction moments ago is known good: only one idle for a while is pinged. One that fails is
    replaced (DisconnectionError makes the pool discard it and check out another).
    """
    pool = engine.sync_engine.pool

    def returned(_dbapi_connection: Any, record: ConnectionPoolEntry) -> None:
        record.info[RETURNED_AT] = record.info.pop(IDLE_SINCE, None) or time.monotonic()

    def handed_out(dbapi_connection: Any, record: ConnectionPoolEntry, _proxy: Any) -> None:
        returned_at = record.info.get(RETURNED_AT)
        if returned_at is None or time.monotonic() - returned_at < IDLE_PING_SECONDS:
            return  # new, or in use moments ago
        try:
            dbapi_connection.ping()
        except Exception as failed:
            raise exc.DisconnectionError(f"idle connection failed its ping: {failed}") from failed

    event.listen(pool, "checkin", returned)
    event.listen(pool, "checkout", handed_out)
