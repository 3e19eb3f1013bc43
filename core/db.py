"""Engine, sessions and the one commit point that publishes after commit."""

from __future__ import annotations

import asyncio
import logging
import sqlite3
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

from sqlalchemy import event, exc
from sqlalchemy.engine import Connection
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker, create_async_engine
from sqlalchemy.pool import ConnectionPoolEntry
from sqlalchemy.util import await_only

from core.bus import Bus

log = logging.getLogger(__name__)

_PENDING = "vouch_publish_after_commit"
_EVENTS = "vouch_events_after_commit"

# Receives each committed event's wire message (core.events.event_message). Registered at start-up by
# the process's composition root (the web app emits into Socket.IO rooms, a worker into Redis), so core
# needs to know nothing of who listens.
EventSink = Callable[[dict[str, Any]], Awaitable[None]]


def _sqlite_pragmas(dbapi_connection: Any, _record: ConnectionPoolEntry) -> None:
    # Let SQLAlchemy's "begin" hook below issue BEGIN itself, instead of pysqlite guessing.
    dbapi_connection.isolation_level = None
    cursor = dbapi_connection.cursor()
    for pragma in (
        "journal_mode=WAL",
        "synchronous=NORMAL",
        "busy_timeout=30000",
        "foreign_keys=ON",
    ):
        cursor.execute(f"PRAGMA {pragma}")
    cursor.close()


_WRITING = "vouch_sqlite_writer"
_BUSY_SECONDS = 30.0


class _SqliteWriters:
    """This process's SQLite writers take turns on the event loop before BEGIN IMMEDIATE.

    SQLite lets one writer in at a time. A writer that finds the lock taken waits in SQLite's busy handler,
    which sleeps 1, 2, 5, 10, … up to 100 ms between tries however soon the lock comes free: with the web app
    and the worker in one process (`vouch serve`), a handful of concurrent transactions turned milliseconds of
    work into waits of hundreds of milliseconds (bench/README.md). Queued here instead, in order, the next writer
    starts the moment the last one commits. Writers in other processes still meet at SQLite's lock.
    """

    def __init__(self) -> None:
        self._locks: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Lock] = weakref.WeakKeyDictionary()

    def _lock(self) -> asyncio.Lock:
        loop = asyncio.get_running_loop()
        lock = self._locks.get(loop)
        if lock is None:
            lock = self._locks[loop] = asyncio.Lock()
        return lock

    async def _acquire(self) -> asyncio.Lock:
        lock = self._lock()
        try:
            await asyncio.wait_for(lock.acquire(), _BUSY_SECONDS)
        except TimeoutError:
            raise sqlite3.OperationalError("database is locked") from None
        return lock

    def begin(self, conn: Connection) -> None:
        # A writer must hold the lock from its first statement: a deferred BEGIN that later
        # upgrades to a write either loses updates or fails with "database is locked".
        if not conn.get_execution_options().get("vouch_write", False):
            conn.exec_driver_sql("BEGIN")
            return
        # Runs inside SQLAlchemy's greenlet for the async driver: await_only waits on this process's loop.
        conn.info[_WRITING] = await_only(self._acquire())
        try:
            conn.exec_driver_sql("BEGIN IMMEDIATE")
        except BaseException:
            self.release(conn.info)
            raise

    @staticmethod
    def release(info: dict[Any, Any]) -> None:
        lock: asyncio.Lock | None = info.pop(_WRITING, None)
        if lock is not None:
            lock.release()

    def _release_connection(self, conn: Connection) -> None:
        try:
            info = conn.info
        except (exc.DBAPIError, exc.InvalidRequestError):
            # Invalidated mid-statement (a cancelled task): the pool's invalidate or checkin event releases it.
            return
        self.release(info)

    def listen(self, engine: AsyncEngine) -> None:
        sync = engine.sync_engine
        event.listen(sync, "begin", self.begin)
        # The transaction ends (commit, rollback), or its connection goes back to the pool or away: next writer.
        event.listen(sync, "commit", self._release_connection)
        event.listen(sync, "rollback", self._release_connection)
        event.listen(
            sync.pool, "checkin", lambda dbapi_connection, connection_record: self.release(connection_record.info)
        )
        event.listen(
            sync.pool,
            "invalidate",
            lambda dbapi_connection, connection_record, exception: self.release(connection_record.info),
        )


def make_engine(url: str, **kwargs: Any) -> AsyncEngine:
    if url.startswith("sqlite"):
        engine = create_async_engine(url, connect_args={"timeout": _BUSY_SECONDS}, **kwargs)
        event.listen(engine.sync_engine, "connect", _sqlite_pragmas)
        _SqliteWriters().listen(engine)
        return engine
    return create_async_engine(url, pool_size=10, max_overflow=20, pool_pre_ping=True, **kwargs)


def publish_after_commit(session: AsyncSession, channel: str, message: dict[str, Any]) -> None:
    """Queue a bus message that goes out only if, and after, the session commits."""
    session.info.setdefault(_PENDING, []).append((channel, message))


def event_after_commit(session: AsyncSession, message: dict[str, Any]) -> None:
    """Queue an event's wire message for the event sinks, sent only if, and after, the session commits."""
    session.info.setdefault(_EVENTS, []).append(message)


class Database:
    def __init__(self, url: str, bus: Bus) -> None:
        self.url = url
        self.bus = bus
        self.engine = make_engine(url)
        self.dialect = self.engine.dialect.name
        self._read = async_sessionmaker(self.engine, expire_on_commit=False)
        self._write = async_sessionmaker(self.engine.execution_options(vouch_write=True), expire_on_commit=False)
        self._event_sinks: list[EventSink] = []
        # Tasks inside a write transaction (with its depth), and those to cancel as soon as it ends.
        self._writing: dict[asyncio.Task[Any], int] = {}
        self._stop_after: set[asyncio.Task[Any]] = set()

    def stop(self, task: asyncio.Task[Any]) -> None:
        """Cancel `task`, but never halfway through one of its transactions: a statement cancelled mid-way
        leaves its connection (on SQLite, with the database's write lock) to be torn down behind our back,
        and the next writer waits. A task inside a transaction is cancelled as that transaction ends."""
        if self._writing.get(task):
            self._stop_after.add(task)
        else:
            task.cancel()

    def add_event_sink(self, sink: EventSink) -> None:
        self._event_sinks.append(sink)

    def remove_event_sink(self, sink: EventSink) -> None:
        if sink in self._event_sinks:
            self._event_sinks.remove(sink)

    def session(self, *, write: bool) -> AsyncSession:
        """A session; the caller owns its one commit point (`commit`)."""
        return (self._write if write else self._read)()

    async def commit(self, session: AsyncSession) -> None:
        pending: list[tuple[str, dict[str, Any]]] = session.info.pop(_PENDING, [])
        events: list[dict[str, Any]] = session.info.pop(_EVENTS, [])
        await session.commit()
        # Events before bus messages: a decision's event then leaves before the wake-up that lets a
        # worker append the next one, so watchers usually see them in order (they reorder by seq anyway).
        for message in events:
            for sink in tuple(self._event_sinks):
                try:
                    await sink(message)
                except Exception:
                    log.warning("event sink failed for %s seq %s", message.get("executionId"), message.get("seq"),
                                exc_info=True)
        for channel, message in pending:
            # The rows are committed: a lost message costs latency (the poll catches up), and
            # must not make the caller believe its transaction failed.
            try:
                await self.bus.publish(channel, message)
            except Exception:
                log.warning("publishing to %s after commit failed", channel, exc_info=True)

    @asynccontextmanager
    async def transaction(self) -> AsyncIterator[AsyncSession]:
        """A write session committed on success, rolled back on error."""
        task = asyncio.current_task()
        if task is not None:
            self._writing[task] = self._writing.get(task, 0) + 1
        try:
            async with self.session(write=True) as session:
                try:
                    yield session
                except BaseException as ended:
                    session.info.pop(_PENDING, None)
                    session.info.pop(_EVENTS, None)
                    try:
                        await session.rollback()
                    except Exception:
                        # A connection invalidated by a cancellation cannot roll back; closing the session
                        # discards it. What the caller must see is why the transaction ended (e.g. the
                        # cancellation), never this.
                        log.debug("rollback after %s failed", type(ended).__name__, exc_info=True)
                    raise
                await self.commit(session)
        finally:
            if task is not None:
                depth = self._writing.pop(task) - 1
                if depth:
                    self._writing[task] = depth
                elif task in self._stop_after:
                    self._stop_after.discard(task)
                    raise asyncio.CancelledError("stopped once its transaction ended")

    @asynccontextmanager
    async def reading(self) -> AsyncIterator[AsyncSession]:
        async with self.session(write=False) as session:
            yield session

    async def dispose(self) -> None:
        await self.engine.dispose()
