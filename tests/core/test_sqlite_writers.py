"""SQLite writers (core/sqlite.py): their statements run on the event loop, and only a wait for another
process's write lock goes to aiosqlite's thread, leaving the loop free meanwhile."""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import sqlalchemy as sa

from core.bus import InProcessBus
from core.db import Database


@pytest.fixture
async def sqlite_db(tmp_path: Path) -> AsyncIterator[Database]:
    database = Database(f"sqlite+aiosqlite:///{tmp_path / 'writers.sqlite3'}", InProcessBus())
    async with database.transaction() as session:
        await session.execute(sa.text("CREATE TABLE notes (text TEXT)"))
    yield database
    await database.dispose()


def other_process_writing(db: Database) -> sqlite3.Connection:
    """A connection of its own holding SQLite's write lock, as a writer in another process would."""
    database = sa.make_url(db.url).database
    assert database
    other = sqlite3.connect(database, isolation_level=None)
    other.execute("BEGIN IMMEDIATE")
    return other


async def notes(db: Database) -> list[str]:
    async with db.reading() as session:
        return list(await session.scalars(sa.text("SELECT text FROM notes ORDER BY text")))


async def write(db: Database, text: str) -> None:
    async with db.transaction() as session:
        await session.execute(sa.text("INSERT INTO notes VALUES (:text)"), {"text": text})


async def test_a_writer_waiting_for_another_process_leaves_the_loop_free(sqlite_db: Database) -> None:
    other = other_process_writing(sqlite_db)
    ticks = 0
    ticking = asyncio.Event()

    async def tick() -> None:
        nonlocal ticks
        while True:
            ticks += 1
            if ticks == 20:
                ticking.set()
            await asyncio.sleep(0.005)

    writing = asyncio.create_task(write(sqlite_db, "after"))
    ticker = asyncio.create_task(tick())
    # The loop runs other work while the writer waits behind the other process...
    await asyncio.wait_for(ticking.wait(), 10)
    assert not writing.done()
    other.rollback()
    other.close()
    # ... and the writer goes on once that process lets go.
    await asyncio.wait_for(writing, 10)
    ticker.cancel()
    assert await notes(sqlite_db) == ["after"]


async def test_writers_in_turn_and_readers_beside_them(sqlite_db: Database) -> None:
    await asyncio.gather(*(write(sqlite_db, f"n{n:02d}") for n in range(30)))
    assert await notes(sqlite_db) == [f"n{n:02d}" for n in range(30)]


async def test_a_failed_writer_rolls_back_and_frees_the_database(sqlite_db: Database) -> None:
    with pytest.raises(sa.exc.OperationalError, match="no such table"):
        async with sqlite_db.transaction() as session:
            await session.execute(sa.text("INSERT INTO notes VALUES ('lost')"))
            await session.execute(sa.text("INSERT INTO no_such_table VALUES (1)"))
    await write(sqlite_db, "kept")
    assert await notes(sqlite_db) == ["kept"]
