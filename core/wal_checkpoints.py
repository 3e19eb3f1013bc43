"""SQLite's WAL checkpoints on a thread of their own, never inside a commit on the event loop.

By default SQLite checkpoints inside the commit that takes its write-ahead log past 1,000 pages: that commit
copies the log's pages into the database file and syncs both before it returns. Write transactions here run on
the event loop's own thread (core/sqlite.py), so that commit held up everything else the process was doing,
approvals and steps alike. In alternating pairs on the embedded bench, moving the checkpoints here took the
approve → resumed step p99 from 7.8, 8.6, 8.9 ms to 6.4, 6.2, 6.2 ms, and the durable step's p99 from 4.8 and
4.6 ms to 1.6 and 1.7 ms (bench/README.md, issue 25).

So a database's connections here never checkpoint by themselves (`wal_autocheckpoint=0`). Instead, a commit of
a write transaction asks for a PASSIVE checkpoint `AFTER_SECONDS` later, made on a worker thread through a
connection kept for it; commits meanwhile join that one. A passive checkpoint waits for nobody: what a reader
still uses is left for the next. The log then holds at most about that long of writes, where the default let
up to 1,000 pages wait unsynced while the service idled (synchronous=NORMAL syncs at checkpoints).
"""

from __future__ import annotations

import asyncio
import logging
import sqlite3
from typing import Any

from sqlalchemy import event
from sqlalchemy.engine import Connection
from sqlalchemy.ext.asyncio import AsyncEngine
from sqlalchemy.pool import ConnectionPoolEntry

log = logging.getLogger(__name__)

AFTER_SECONDS = 0.5


class WalCheckpoints:
    """The checkpoints of one engine's database file (`path`); `close` before the engine is disposed."""

    def __init__(self, engine: AsyncEngine, path: str) -> None:
        self._path = path
        self._connection: sqlite3.Connection | None = None
        self._due: asyncio.TimerHandle | None = None
        self._running: asyncio.Task[None] | None = None
        self._closed = False
        self.done = 0  # checkpoints made, for tests and the curious
        sync = engine.sync_engine
        event.listen(sync, "connect", _no_autocheckpoint)
        event.listen(sync, "commit", self._committed)

    def _committed(self, conn: Connection) -> None:
        if self._closed or self._due is not None or not conn.get_execution_options().get("vouch_write", False):
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return  # a commit outside this process's event loop: the next one on it asks
        self._due = loop.call_later(AFTER_SECONDS, self._start)

    def _start(self) -> None:
        self._due = None
        if self._running is not None and not self._running.done():
            # One at a time: the commits since are taken by the next, asked for once this one ends.
            self._running.add_done_callback(lambda _task: self._again())
            return
        self._running = asyncio.get_running_loop().create_task(self._checkpoint(), name="wal-checkpoint")

    def _again(self) -> None:
        if not self._closed and self._due is None:
            self._due = asyncio.get_running_loop().call_later(AFTER_SECONDS, self._start)

    async def _checkpoint(self) -> None:
        try:
            await asyncio.to_thread(self._checkpoint_now)
            self.done += 1
        except sqlite3.Error as failed:
            # The log stays as it is; the next commit asks again.
            log.warning("SQLite WAL checkpoint of %s failed: %s", self._path, failed)

    def _checkpoint_now(self) -> None:
        if self._connection is None:
            self._connection = sqlite3.connect(self._path, check_same_thread=False, isolation_level=None)
        self._connection.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()

    async def close(self) -> None:
        """No more checkpoints from here; the one under way, if any, ends first."""
        self._closed = True
        if self._due is not None:
            self._due.cancel()
            self._due = None
        if self._running is not None:
            await asyncio.wait({self._running})
        if self._connection is not None:
            self._connection.close()
            self._connection = None


def _no_autocheckpoint(dbapi_connection: Any, _record: ConnectionPoolEntry) -> None:
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA wal_autocheckpoint=0")
    cursor.close()
