"""`Database.keeping_alone`: a task's statements alone share one connection until the block ends."""

from __future__ import annotations

import asyncio
import time

import pytest
from sqlalchemy import event

import core.db
import core.engines
from core.db import Database, publish_after_commit


async def _backend_pid(db: Database) -> int:
    async with db.alone() as alone:
        pid = (await alone.connection.exec_driver_sql("SELECT pg_backend_pid()")).scalar_one()
        assert isinstance(pid, int)
        return pid


def _checked_out(db: Database) -> int:
    count: int = db.engine.sync_engine.pool.checkedout()  # type: ignore[attr-defined]
    return count


async def _keeps_nothing(db: Database) -> bool:
    """Where every write is a transaction (SQLite), the block keeps nothing and statements alone are refused."""
    if db.backend.writes_alone:
        return False
    async with db.keeping_alone():
        with pytest.raises(RuntimeError, match="transactions only"):
            async with db.alone():
                pass
    return True


async def test_a_tasks_statements_share_one_connection_until_the_block_ends(db: Database) -> None:
    if await _keeps_nothing(db):
        return
    async with db.keeping_alone():
        first = await _backend_pid(db)
        assert _checked_out(db) == 1  # kept between statements
        assert await _backend_pid(db) == first
        # A task started inside the block runs its own statements on another connection, even now.
        assert await asyncio.create_task(_backend_pid(db)) != first
        assert await _backend_pid(db) == first
    assert _checked_out(db) == 0
    await _backend_pid(db)
    assert _checked_out(db) == 0  # outside the block, each statement hands its connection back


async def test_a_failed_statement_hands_the_kept_connection_back(db: Database) -> None:
    if await _keeps_nothing(db):
        return
    async with db.keeping_alone():
        await _backend_pid(db)
        with pytest.raises(Exception, match="no_such_table"):
            async with db.alone() as alone:
                await alone.connection.exec_driver_sql("SELECT * FROM no_such_table")
        assert _checked_out(db) == 0
        await _backend_pid(db)
        assert _checked_out(db) == 1
    assert _checked_out(db) == 0


async def test_a_connection_kept_idle_goes_back_to_the_pool_before_the_next_statement(
    db: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    if await _keeps_nothing(db):
        return
    checkins: list[object] = []
    pool = db.engine.sync_engine.pool
    listener = lambda dbapi_connection, record: checkins.append(record)  # noqa: E731
    event.listen(pool, "checkin", listener)
    try:
        async with db.keeping_alone():
            await _backend_pid(db)
            await _backend_pid(db)
            assert checkins == []
            async with db.alone() as alone:
                kept_info = alone.connection.info  # the pooled connection's, kept with it in the pool
            last_used = time.monotonic()
            # Every connection now counts as idle long enough to be checked by the pool before reuse.
            monkeypatch.setattr(core.engines, "IDLE_PING_SECONDS", 0.0)
            await _backend_pid(db)
            assert len(checkins) == 1
            assert _checked_out(db) == 1
            # The pool took it back as idle since its last statement, not since that check-in: had it idled
            # past the pool's threshold, the pool pinged it before handing it out again.
            assert kept_info[core.engines.RETURNED_AT] <= last_used
        assert len(checkins) == 2
    finally:
        event.remove(pool, "checkin", listener)


async def test_a_kept_tasks_news_leaves_in_commit_order_while_it_goes_on_and_all_before_the_block_ends(
    db: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    if await _keeps_nothing(db):
        return
    monkeypatch.setattr(core.db, "NEWS_SPACING_SECONDS", 0.0)  # every batch as soon as the task waits
    heard: list[int] = []
    listening = db.bus.listen(("news:",), lambda _channel, message: heard.append(message["n"]), lambda: None)
    try:
        async with db.keeping_alone():
            async with db.alone() as alone:
                await alone.connection.exec_driver_sql("SELECT 1")
                publish_after_commit(alone, "news:a", {"n": 1})
            # Committed, its news not sent yet: the task goes on to its next statement first.
            assert heard == []
            async with db.transaction() as session:
                publish_after_commit(session, "news:a", {"n": 2})
            async with db.alone() as alone:
                # While this statement is at the database, the news of the commits before it leaves.
                await alone.connection.exec_driver_sql("SELECT pg_sleep(0.01)")
                assert heard == [1, 2]
                publish_after_commit(alone, "news:a", {"n": 3})
            assert heard == [1, 2]
        assert heard == [1, 2, 3]  # all of it before the block ends
        # Outside a block, a commit's news has left when it returns.
        async with db.alone() as alone:
            publish_after_commit(alone, "news:a", {"n": 4})
        assert heard == [1, 2, 3, 4]
    finally:
        await listening.stop()


async def test_a_kept_tasks_news_after_its_first_batch_waits_out_the_spacing_but_not_the_blocks_end(
    db: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    if await _keeps_nothing(db):
        return
    monkeypatch.setattr(core.db, "NEWS_SPACING_SECONDS", 60.0)
    heard: list[int] = []
    listening = db.bus.listen(("news:",), lambda _channel, message: heard.append(message["n"]), lambda: None)
    try:
        async with db.keeping_alone():
            for n in (1, 2, 3):
                async with db.alone() as alone:
                    await alone.connection.exec_driver_sql("SELECT 1")
                    publish_after_commit(alone, "news:a", {"n": n})
            async with db.alone() as alone:
                await alone.connection.exec_driver_sql("SELECT 1")
            assert heard == [1]  # the first batch left while the next statement ran; the rest waits
        assert heard == [1, 2, 3]  # the block's end sends what waits, without waiting out the minute
    finally:
        await listening.stop()
