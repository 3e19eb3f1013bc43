"""core.events.append_any_event: per-execution seq, contiguous, unique under concurrency."""

from __future__ import annotations

import asyncio
from typing import Any

import sqlalchemy as sa

from api.auth import Caller
from api.schemas import CreateTaskIn
from api.tasks import create_execution
from core.bus import execution_channel
from core.db import Database
from core.event_messages import event_message
from core.events import append_any_event, events_after
from core.ids import new_id
from core.models import ApiKey, Event, Execution
from core.settings import Settings
from tests.conftest import make_account


async def new_executions(db: Database, settings: Settings, count: int) -> list[str]:
    account = await make_account(db, settings, f"{new_id('u')}@example.com")
    async with db.transaction() as session:
        key_id = await session.scalar(sa.select(ApiKey.id).where(ApiKey.user_id == account.user_id))
        caller = Caller(account.user_id, account.email, str(key_id), frozenset({"eval:manage"}))
        task = CreateTaskIn.model_validate(
            {"taskName": "t", "taskDescription": "Write a note saying hi.", "testMode": "without-verification"}
        )
        return [(await create_execution(session, caller, task, "offline")).id for _ in range(count)]


async def seqs(db: Database, execution_id: str) -> list[int]:
    async with db.reading() as session:
        return [e.seq for e in await events_after(session, execution_id)]


async def last_seq(db: Database, execution_id: str) -> int:
    async with db.reading() as session:
        return (await session.get_one(Execution, execution_id)).last_seq


async def test_seqs_are_contiguous_and_per_execution(db: Database, settings: Settings) -> None:
    one, two = await new_executions(db, settings, 2)
    # create_execution already wrote execution.created as seq 1 of each.
    assert await seqs(db, one) == [1]
    async with db.transaction() as session:
        a = await append_any_event(session, one, "test.a", {"n": 1})
        b = await append_any_event(session, one, "test.b")
        c = await append_any_event(session, two, "test.c")
    assert (a.seq, b.seq, c.seq) == (2, 3, 2)
    async with db.transaction() as session:
        for n in range(5):
            await append_any_event(session, two, "test.more", {"n": n})
    assert await seqs(db, one) == [1, 2, 3]
    assert await seqs(db, two) == [1, 2, 3, 4, 5, 6, 7]
    assert await last_seq(db, one) == 3
    assert await last_seq(db, two) == 7
    async with db.reading() as session:
        later = await events_after(session, two, 4)
    assert [e.seq for e in later] == [5, 6, 7]
    assert [e.payload for e in later] == [{"n": 2}, {"n": 3}, {"n": 4}]
    assert b.payload == {}


async def test_rolled_back_event_gives_its_seq_back(db: Database, settings: Settings) -> None:
    (one,) = await new_executions(db, settings, 1)
    try:
        async with db.transaction() as session:
            await append_any_event(session, one, "test.lost")
            raise LookupError
    except LookupError:
        pass
    async with db.transaction() as session:
        kept = await append_any_event(session, one, "test.kept")
    assert kept.seq == 2
    assert await seqs(db, one) == [1, 2]


async def test_event_is_published_after_commit_with_its_seq(db: Database, settings: Settings) -> None:
    (one,) = await new_executions(db, settings, 1)
    heard: list[dict[str, Any]] = []
    db.add_event_sink(_Sink(heard))
    async with db.bus.subscribe(execution_channel(one)) as sub:
        async with db.transaction() as session:
            event = await append_any_event(session, one, "test.live", {"x": 1})
            assert await sub.get(timeout=0) is None
            assert heard == []
        message = await sub.get(timeout=5)
    # The execution's channel says that something was committed, and up to which seq; the sinks get the event.
    assert message == {"executionId": one, "seq": 2}
    assert heard == [event_message(event)]
    assert heard[0]["type"] == "test.live"
    assert heard[0]["payload"] == {"x": 1}
    assert isinstance(heard[0]["at"], str) and heard[0]["at"].endswith("Z")


class _Sink:
    def __init__(self, heard: list[dict[str, Any]]) -> None:
        self._heard = heard

    async def __call__(self, message: dict[str, Any]) -> None:
        self._heard.append(message)


async def test_concurrent_appends_get_unique_contiguous_seqs(db: Database, settings: Settings) -> None:
    one, two = await new_executions(db, settings, 2)

    async def append_some(execution_id: str, writer: int) -> list[int]:
        async with db.transaction() as session:
            events = [await append_any_event(session, execution_id, "test.concurrent", {"w": writer}) for _ in range(3)]
            await asyncio.sleep(0)  # let the others try to interleave before commit
            return [e.seq for e in events]

    results: list[Any] = await asyncio.gather(*(append_some(one if w % 2 else two, w) for w in range(16)))
    for per_writer in results:
        # One transaction's events are consecutive: nobody got in between.
        assert per_writer == list(range(per_writer[0], per_writer[0] + 3))
    assert await seqs(db, one) == list(range(1, 1 + 1 + 8 * 3))
    assert await seqs(db, two) == list(range(1, 1 + 1 + 8 * 3))
    assert await last_seq(db, one) == 25
    async with db.reading() as session:
        total = await session.scalar(sa.select(sa.func.count()).select_from(Event).where(Event.execution_id == one))
    assert total == 25
