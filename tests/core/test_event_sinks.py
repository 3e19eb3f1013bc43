"""Event sinks (core.db): each committed event's wire message, after commit, never for a rollback."""

from __future__ import annotations

from typing import Any

import pytest

from core.db import Database
from core.event_messages import event_message
from core.events import append_any_event
from core.settings import Settings
from tests.core.test_events import new_executions


async def test_sinks_get_committed_events_in_order_and_nothing_rolled_back(db: Database, settings: Settings) -> None:
    (execution_id,) = await new_executions(db, settings, 1)
    seen: list[tuple[str, int]] = []

    async def first(message: dict[str, Any]) -> None:
        seen.append(("first", message["seq"]))

    async def second(message: dict[str, Any]) -> None:
        seen.append(("second", message["seq"]))

    db.add_event_sink(first)
    db.add_event_sink(second)
    with pytest.raises(LookupError):
        async with db.transaction() as session:
            await append_any_event(session, execution_id, "test.lost")
            raise LookupError
    async with db.transaction() as session:
        one = await append_any_event(session, execution_id, "test.kept", {"n": 1})
        two = await append_any_event(session, execution_id, "test.kept", {"n": 2})
        assert seen == []  # nothing before the commit
    assert seen == [("first", 2), ("second", 2), ("first", 3), ("second", 3)]
    db.remove_event_sink(first)
    db.remove_event_sink(second)
    assert (one.seq, two.seq) == (2, 3)


async def test_a_failing_sink_neither_fails_the_commit_nor_starves_the_others(
    db: Database, settings: Settings
) -> None:
    (execution_id,) = await new_executions(db, settings, 1)
    got: list[dict[str, Any]] = []

    async def broken(message: dict[str, Any]) -> None:
        raise ConnectionError("redis is down")

    async def working(message: dict[str, Any]) -> None:
        got.append(message)

    db.add_event_sink(broken)
    db.add_event_sink(working)
    async with db.transaction() as session:
        event = await append_any_event(session, execution_id, "test.kept")
    assert got == [event_message(event)]
