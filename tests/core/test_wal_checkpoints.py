"""core/wal_checkpoints.py: SQLite's WAL is checkpointed on a thread after commits, never inside one on the loop.

Seen from outside through the log's file: a write transaction that finds every frame of the log checkpointed
starts it again from its beginning, so the file stops growing; without a checkpoint each one adds its pages."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import sqlalchemy as sa

from core import wal_checkpoints
from core.bus import InProcessBus
from core.db import Database
from tests.support.waiting import until

# Past SQLite's default autocheckpoint of 1,000 pages (4 KiB each) in one transaction.
BIG = 6_000_000


@pytest.fixture
async def sqlite_db(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[Database]:
    """A database whose checkpoints come 10 ms after a commit; its first, after creating the table, is made."""
    monkeypatch.setattr(wal_checkpoints, "AFTER_SECONDS", 0.01)
    database = Database(f"sqlite+aiosqlite:///{tmp_path / 'wal.sqlite3'}", InProcessBus())
    async with database.transaction() as session:
        await session.execute(sa.text("CREATE TABLE blobs (b BLOB)"))
    await made(database, 1)
    yield database
    await database.dispose()


async def made(db: Database, count: int) -> None:
    """Wait until `count` checkpoints are made. Each starts after the commit that asked for it: one made after the
    last commit includes it."""
    checkpoints = db.wal_checkpoints
    assert checkpoints is not None
    await until(lambda: _true(checkpoints.done >= count))


async def write(db: Database, size: int) -> None:
    async with db.transaction() as session:
        await session.execute(sa.text("INSERT INTO blobs VALUES (randomblob(:size))"), {"size": size})


def log_size(db: Database) -> int:
    database = sa.make_url(db.url).database
    assert database
    return os.path.getsize(f"{database}-wal")


async def test_a_commit_past_a_thousand_pages_does_not_checkpoint(
    sqlite_db: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(wal_checkpoints, "AFTER_SECONDS", 3600)
    for _ in range(3):
        await write(sqlite_db, BIG)
    # SQLite's own checkpoint, inside the first commit, would have let the next ones start the log again.
    assert log_size(sqlite_db) > 2.5 * BIG


async def test_the_log_is_checkpointed_soon_after_a_commit_and_starts_again(sqlite_db: Database) -> None:
    for count in range(2, 5):
        await write(sqlite_db, BIG)
        await made(sqlite_db, count)
    assert log_size(sqlite_db) < 1.5 * BIG


async def test_an_in_memory_database_has_no_checkpoints() -> None:
    database = Database("sqlite+aiosqlite:///:memory:", InProcessBus())
    try:
        assert database.wal_checkpoints is None
    finally:
        await database.dispose()


async def _true(value: bool) -> bool | None:
    return True if value else None
