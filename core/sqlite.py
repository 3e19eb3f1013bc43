"""SQLite as this service uses it: one file, WAL, and this process's writers queued on the event loop.

Statements of a write transaction run on the event loop's own thread. aiosqlite sends every call (cursor,
execute, fetch, close) through its connection's thread and back, four thread hand-offs a statement; on this
machine those hand-offs, not SQLite, were most of a durable agent step (bench/README.md). Inside a write
transaction the statements are short, the in-process writer lock (below) is held, and SQLite has nothing to
wait for, so running them inline costs microseconds and cannot be interrupted half-way by a cancellation. The
one statement that may wait, BEGIN IMMEDIATE (for a writer in another process), still goes through the thread,
as do read-only sessions, whose queries may be long.
"""

from __future__ import annotations

import asyncio
import collections
import sqlite3
import weakref
from collections.abc import Callable
from typing import Any

import aiosqlite
from sqlalchemy import event, exc
from sqlalchemy.dialects.sqlite.aiosqlite import (
    AsyncAdapt_aiosqlite_connection,
    AsyncAdapt_aiosqlite_cursor,
    AsyncAdapt_aiosqlite_dbapi,
)
from sqlalchemy.engine import Connection, make_url
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine
from sqlalchemy.pool import ConnectionPoolEntry
from sqlalchemy.util import await_only

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
        # Runs inside SQLAlchemy's greenlet for the async driver: await_only waits on this process's loop.
        conn.info[_WRITING] = await_only(self._acquire())
        driver = conn.connection.driver_connection
        try:
            if isinstance(driver, _LoopConnection):
                if not driver.begin_immediate_now():
                    await_only(driver.begin_immediate_waiting())
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
        driver: _LoopConnection | None = info.pop(_INLINE, None)
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


class _LoopConnection(aiosqlite.Connection):
    """aiosqlite's connection, but calls run on the event loop's thread while `inline` is set."""

    inline = False

    @property
    def runs_inline(self) -> bool:
        # Never while a call sent to the thread is still under way: SQLAlchemy awaits each call before the
        # next, and `inline` only changes between transactions.
        return self.inline and self._running and self._connection is not None

    async def _execute(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        if self.runs_inline:
            return fn(*args, **kwargs)
        return await super()._execute(fn, *args, **kwargs)  # type: ignore[no-untyped-call]

    def begin_immediate_now(self) -> bool:
        """BEGIN IMMEDIATE on the loop's thread, without waiting, then run inline; False when a writer in another
        process holds SQLite's lock (then `begin_immediate_waiting`)."""
        connection = self._conn
        connection.execute("PRAGMA busy_timeout=0")
        try:
            connection.execute("BEGIN IMMEDIATE")
        except sqlite3.OperationalError as exc:
            if exc.sqlite_errorcode != sqlite3.SQLITE_BUSY:
                raise
            return False
        finally:
            connection.execute(f"PRAGMA {_BUSY_TIMEOUT}")
        self.inline = True
        return True

    async def begin_immediate_waiting(self) -> None:
        """BEGIN IMMEDIATE on the connection's thread, waiting in SQLite's busy handler, then run inline."""
        await super()._execute(self._conn.execute, "BEGIN IMMEDIATE")  # type: ignore[no-untyped-call]
        self.inline = True


class _InlineCursor(AsyncAdapt_aiosqlite_cursor):
    """SQLAlchemy's cursor over aiosqlite, which, while its connection runs inline, uses a sqlite3 cursor directly.

    SQLAlchemy's adapter reaches the driver through `await_only`: a greenlet switch and aiosqlite's coroutines for
    opening the cursor, for the statement (behind an asyncio lock) and for closing it, even when each call then
    runs inline. Inline there is nothing to wait for: the cursor is opened and closed where SQLAlchemy asks, and
    the statement and its rows are one coroutine with no lock.
    """

    __slots__ = ()

    def _make_new_cursor(self, connection: Any) -> Any:
        if isinstance(connection, _LoopConnection) and connection.runs_inline:
            return connection._conn.cursor()
        return super()._make_new_cursor(connection)

    def _aenter_cursor(self, cursor: Any) -> Any:
        return cursor if isinstance(cursor, sqlite3.Cursor) else super()._aenter_cursor(cursor)

    def execute(self, operation: Any, parameters: Any = None) -> Any:
        if not isinstance(self._cursor, sqlite3.Cursor):
            return super().execute(operation, parameters)
        try:
            # Still one await: SQLAlchemy's AsyncConnection.execute insists that a statement awaited something.
            return await_only(self._inline(self._cursor, False, operation, () if parameters is None else parameters))
        except Exception as error:
            self._adapt_connection._handle_exception(error)

    def executemany(self, operation: Any, seq_of_parameters: Any) -> Any:
        if not isinstance(self._cursor, sqlite3.Cursor):
            return super().executemany(operation, seq_of_parameters)
        try:
            return await_only(self._inline(self._cursor, True, operation, seq_of_parameters))
        except Exception as error:
            self._adapt_connection._handle_exception(error)

    async def _inline(self, cursor: sqlite3.Cursor, many: bool, operation: str, parameters: Any) -> Any:
        result = cursor.executemany(operation, parameters) if many else cursor.execute(operation, parameters)
        if cursor.description:
            self._rows = collections.deque(cursor.fetchall())
        return result

    async def _async_soft_close(self) -> None:
        cursor = self._cursor
        if not isinstance(cursor, sqlite3.Cursor):
            await super()._async_soft_close()
        elif not self._soft_closed_memoized:
            self._soft_closed_memoized = self._soft_closed_memoized.union({"description": cursor.description})
            cursor.close()

    def close(self) -> None:
        cursor = self._cursor
        if not isinstance(cursor, sqlite3.Cursor):
            super().close()
            return
        self._rows.clear()
        if not self._soft_closed_memoized:
            cursor.close()


class _InlineConnection(AsyncAdapt_aiosqlite_connection):
    """Its cursors are `_InlineCursor`s, and an inline COMMIT or ROLLBACK is called directly too."""

    __slots__ = ()
    _cursor_cls = _InlineCursor

    def commit(self) -> None:
        self._end_transaction("commit")

    def rollback(self) -> None:
        self._end_transaction("rollback")

    def _end_transaction(self, how: str) -> None:
        connection = self._connection
        if not (isinstance(connection, _LoopConnection) and connection.runs_inline):
            getattr(super(), how)()
            return
        try:
            getattr(connection._conn, how)()
        except Exception as error:
            self._handle_exception(error)


class _InlineDBAPI(AsyncAdapt_aiosqlite_dbapi):
    """The DBAPI module SQLAlchemy's aiosqlite dialect is given (`module=`): it hands out `_InlineConnection`s."""

    def connect(self, *args: Any, **kwargs: Any) -> _InlineConnection:
        creator = kwargs.pop("async_creator_fn")
        return _InlineConnection(self, await_only(creator(*args, **kwargs)))


def inline_connection(connection: Connection) -> sqlite3.Connection | None:
    """The sqlite3 connection under `connection` while its write transaction runs inline on the loop's thread:
    statements may then be sent to it directly, without a greenlet or a thread hand-off. None otherwise."""
    adapted = connection.connection.dbapi_connection
    driver = adapted._connection if isinstance(adapted, _InlineConnection) else None
    if isinstance(driver, _LoopConnection) and driver.runs_inline:
        return driver._conn
    return None


def make_sqlite_engine(url: str, **kwargs: Any) -> AsyncEngine:
    database = make_url(url).database or ":memory:"

    async def connect() -> _LoopConnection:
        connection = _LoopConnection(
            lambda: sqlite3.connect(database, timeout=_BUSY_SECONDS, check_same_thread=False), 64
        )
        connection._thread.daemon = True  # as SQLAlchemy's aiosqlite dialect does: never holds up exit
        await connection
        return connection

    engine = create_async_engine(url, async_creator=connect, module=_InlineDBAPI(aiosqlite, sqlite3), **kwargs)
    event.listen(engine.sync_engine, "connect", _pragmas)
    _Writers().listen(engine)
    return engine
