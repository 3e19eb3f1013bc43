"""A writer cancelled in the middle of a statement (a stopping worker, a cancelled execution) must end with
its cancellation, and leave the database to the next writer at once."""

from __future__ import annotations

import asyncio
import sqlite3

import pytest
import sqlalchemy as sa

from core.db import Database
from core.models import User

# Long enough that the cancellation lands while PostgreSQL is busy with it.
SLOW = "SELECT pg_sleep(20)"


def sqlite_file(db: Database) -> str:
    database = sa.make_url(db.url).database
    assert database
    return database


async def test_a_writer_cancelled_mid_statement_frees_the_database(db: Database) -> None:
    inside = asyncio.Event()
    other_process: sqlite3.Connection | None = None
    if db.dialect == "sqlite":
        # A SQLite writer's statements run on the event loop (core/sqlite.py) and cannot be cut off half-way;
        # the one that can is BEGIN IMMEDIATE waiting, on aiosqlite's thread, for another process's writer.
        other_process = sqlite3.connect(sqlite_file(db), isolation_level=None)
        other_process.execute("BEGIN IMMEDIATE")

    async def slow_writer() -> None:
        if other_process is not None:
            inside.set()  # the BEGIN below waits behind the other process
            async with db.transaction() as session:
                session.add(User(id="usr_cancelled", email="cancelled@example.com"))
            return
        async with db.transaction() as session:
            session.add(User(id="usr_cancelled", email="cancelled@example.com"))
            await session.flush()
            inside.set()  # no await between this and the statement: it is running when the test resumes
            await session.execute(sa.text(SLOW))

    writer = asyncio.create_task(slow_writer())
    await inside.wait()
    await asyncio.sleep(0)  # the writer is at its first await: waiting on the database
    writer.cancel()
    with pytest.raises(asyncio.CancelledError):
        await writer
    if other_process is not None:
        other_process.rollback()
        other_process.close()
    # The next writer gets the database well inside the 30 s a leaked SQLite write lock would hold it.
    async with asyncio.timeout(10):
        async with db.transaction() as session:
            session.add(User(id="usr_next", email="next@example.com"))
    async with db.reading() as session:
        assert list(await session.scalars(sa.select(User.id).order_by(User.id))) == ["usr_next"]


async def test_stop_waits_for_the_transaction_in_progress_then_cancels(db: Database) -> None:
    inside, go_on = asyncio.Event(), asyncio.Event()
    after_commit: list[str] = []

    async def writer() -> None:
        async with db.transaction() as session:
            session.add(User(id="usr_committed", email="committed@example.com"))
            inside.set()
            await go_on.wait()
        after_commit.append("ran on")  # never: the stop lands as the transaction ends
        await asyncio.Event().wait()

    task = asyncio.create_task(writer())
    await inside.wait()
    db.stop(task)
    assert not task.done()
    go_on.set()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert after_commit == []
    async with db.reading() as session:
        assert list(await session.scalars(sa.select(User.id))) == ["usr_committed"]

    idle = asyncio.create_task(asyncio.Event().wait())  # outside any transaction: cancelled at once
    db.stop(idle)
    with pytest.raises(asyncio.CancelledError):
        await idle
