"""SQLite as this service uses it: one file, WAL, and this process's writers queued on the event loop.

Statements of a write transaction run on the event loop's own thread. aiosqlite sends every call (cursor,
execute, fetch, close) through its connection's thread and back, four thread hand-offs a statement; on this
machine those hand-offs, not SQLite, were most of a durable agent step (bench/README.md). Inside a write
transaction the statements are short, the in-process writer lock (below) is held, and SQLite has nothing to
wait for, so running them inline costs microseconds and cannot be interrupted half-way by a cancellation. The
one statement that may wait, BEGIN IMMEDIATE (for a writer in another process), still goes through the thread,
as do read-only sessions, whose queries may be long. How, past aiosqlite's and SQLAlchemy's public API:
core/_aiosqlite_shortcuts.py and core/_sqlalchemy_shortcuts.py.
"""

from __future__ import annotations

import asyncio
import sqlite3
import weakref
from typing import Any

import aiosqlite
from sqlalchemy import event, exc
from sqlalchemy.engine import Connection, make_url
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine
from sqlalchemy.pool import ConnectionPoolEntry
from sqlalchemy.util import await_

from core._aiosqlite_shortcuts import LoopConnection, open_loop_connection
from core._sqlalchemy_shortcuts import InlineDBAPI

# How long a writer waits for another process's write lock, in SQLite's busy handler.
_BUSY_SECONDS = 30.0
_BUSY_TIMEOUT = f"busy_timeout={int(_BUSY_SECONDS * 1000)}"


def _pragmas(dbapi_connection: Any, _record: ConnectionPoolEntry) -> None:
    # Let SQLAlchemy's "begin" hook below issue BEGIN itself, instead of pysqlite guessing.
    dbapi_connection.isolation_level = None
    cursor = dbapi_connection.cursor()
    for pragma in (
        "journal_mode=WAL",
        "synchronous=NORMAL",
        _BUSY_TIMEOUT,
        "foreign_keys=ON",
    ):
        cursor.execute(f"PRAGMA {pragma}")
    cursor.close()


_WRITING = "vouch_sqlite_writer"
_INLINE = "vouch_sqlite_inline"


class _Writers:
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
        if not lock.locked():
            # Taken at once, without wait_for's task and the turns of the loop it costs every transaction.
            await lock.acquire()
            return lock
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
        # Runs inside SQLAlchemy's greenlet for the async driver: await_ waits on this process's loop.
        conn.info[_WRITING] = await_(self._acquire())
        driver = conn.connection.driver_connection
        try:
            if isinstance(driver, LoopConnection):
                if not driver.begin_immediate_now(_BUSY_TIMEOUT):
                    await_(driver.begin_immediate_waiting())
                # Inline until the connection goes back to the pool: the COMMIT too, right after the
                # lock's release, before the next writer can run.
                conn.info[_INLINE] = driver
            else:
                conn.exec_driver_sql("BEGIN IMMEDIATE")
        except BaseException:
            self.release(conn.info)
            raise

    @staticmethod
    def release(info: dict[Any, Any]) -> None:
        lock: asyncio.Lock | None = info.pop(_WRITING, None)
        if lock is not None:
            lock.release()

    def returned(self, info: dict[Any, Any]) -> None:
        """The connection went back to the pool or away: its next user may be a reader."""
        self.release(info)
        driver: LoopConnection | None = info.pop(_INLINE, None)
        if driver is not None:
            driver.inline = False

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
            sync.pool, "checkin", lambda dbapi_connection, connection_record: self.returned(connection_record.info)
        )
        event.listen(
            sync.pool,
            "invalidate",
            lambda dbapi_connection, connection_record, exception: self.returned(connection_record.info),
        )


def sqlite_file(url: str) -> str | None:
    """The database file a SQLite URL names; None for an in-memory database."""
    database = make_url(url).database
    return None if not database or database == ":memory:" or database.startswith("file::memory:") else database


def make_sqlite_engine(url: str, **kwargs: Any) -> AsyncEngine:
    database = make_url(url).database or ":memory:"

    async def connect() -> LoopConnection:
        return await open_loop_connection(
            lambda: sqlite3.connect(database, timeout=_BUSY_SECONDS, check_same_thread=False)
        )

    engine = create_async_engine(url, async_creator=connect, module=InlineDBAPI(aiosqlite, sqlite3), **kwargs)
    event.listen(engine.sync_engine, "connect", _pragmas)
    _Writers().listen(engine)
    return engine
