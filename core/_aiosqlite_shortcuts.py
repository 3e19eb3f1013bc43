"""Every use of aiosqlite's internals, in one place: an aiosqlite connection whose calls run on the event loop's
own thread while a write transaction holds this process's writer lock (core/sqlite.py).

aiosqlite sends every call (cursor, execute, fetch, close) through its connection's thread and back, four thread
hand-offs a statement; on this machine those hand-offs, not SQLite, were most of a durable agent step. Kept
because alternating pairs show it buys more than 30 % (issue 21, bench/README.md: without it and
core/_sqlalchemy_shortcuts.py SQLite's durable step went 0.57 → 1.2 ms, create → first step 2.9 → 4.7 ms);
aiosqlite has no public way to run a call on the caller's thread.

What it relies on, as read in aiosqlite 0.22.1 (pyproject.toml caps it below 0.23 for this module; read this
code again before widening the range), each pinned by tests/core/test_library_shortcuts.py:

- `Connection(connector, iter_chunk_size)`, awaited to connect: the connector runs on the connection's thread;
- `Connection._execute(fn, *args, **kwargs)`: the one coroutine every call of the connection and of its cursors
  goes through to reach that thread (overridden here);
- `Connection._running` (False once stopped), `Connection._connection` (the sqlite3 connection, None before
  connecting and after closing) and `Connection._conn` (the same, raising when there is none);
- `Connection._thread`, the connection's `threading.Thread`, made a daemon as SQLAlchemy's own aiosqlite dialect
  does.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from typing import Any

import aiosqlite


class LoopConnection(aiosqlite.Connection):
    """aiosqlite's connection, but calls run on the event loop's thread while `inline` is set."""

    inline = False

    @property
    def runs_inline(self) -> bool:
        # Never while a call sent to the thread is still under way: SQLAlchemy awaits each call before the
        # next, and `inline` only changes between transactions.
        return self.inline and self._running and self._connection is not None

    @property
    def sqlite3_connection(self) -> sqlite3.Connection:
        """The sqlite3 connection under it; call it only on the loop's thread while `runs_inline`."""
        return self._conn

    async def _execute(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        if self.runs_inline:
            return fn(*args, **kwargs)
        return await super()._execute(fn, *args, **kwargs)  # type: ignore[no-untyped-call]

    def begin_immediate_now(self, busy_timeout_pragma: str) -> bool:
        """BEGIN IMMEDIATE on the loop's thread, without waiting, then run inline; False when a writer in another
        process holds SQLite's lock (then `begin_immediate_waiting`). `busy_timeout_pragma` is restored after."""
        connection = self._conn
        connection.execute("PRAGMA busy_timeout=0")
        try:
            connection.execute("BEGIN IMMEDIATE")
        except sqlite3.OperationalError as exc:
            if exc.sqlite_errorcode != sqlite3.SQLITE_BUSY:
                raise
            return False
        finally:
            connection.execute(f"PRAGMA {busy_timeout_pragma}")
        self.inline = True
        return True

    async def begin_immediate_waiting(self) -> None:
        """BEGIN IMMEDIATE on the connection's thread, waiting in SQLite's busy handler, then run inline."""
        await super()._execute(self._conn.execute, "BEGIN IMMEDIATE")  # type: ignore[no-untyped-call]
        self.inline = True


async def open_loop_connection(connector: Callable[[], sqlite3.Connection]) -> LoopConnection:
    """A connected `LoopConnection`; `connector` makes the sqlite3 connection, on the connection's thread."""
    connection = LoopConnection(connector, 64)
    connection._thread.daemon = True  # as SQLAlchemy's aiosqlite dialect does: never holds up exit
    await connection
    return connection
