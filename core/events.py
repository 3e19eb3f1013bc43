"""Events: rows first, messages second. Each carries a per-execution `seq`."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncSession

from core.bus import execution_channel
from core.db import event_after_commit, publish_after_commit
from core.models import Event, Execution, utcnow
from core.webhooks import WEBHOOK_EVENT_TYPES, enqueue_for_event


def event_message(event: Event) -> dict[str, Any]:
    """The wire form of an event, the same from the database replay and from the bus."""
    return {
        "executionId": event.execution_id,
        "seq": event.seq,
        "type": event.type,
        "payload": event.payload,
        "at": isoformat(event.created_at),
    }


def isoformat(moment: datetime | None) -> str | None:
    if moment is None:
        return None
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


async def append_event(
    session: AsyncSession, execution_id: str, type_: str, payload: dict[str, Any] | None = None
) -> Event:
    """Add an event in the caller's transaction; it is published once that commits."""
    added = await append_events(session, execution_id, [(type_, payload or {})])
    assert added is not None  # no condition: the row is there (its foreign key says so)
    return added[0]


async def append_events(
    session: AsyncSession,
    execution_id: str,
    items: Sequence[tuple[str, dict[str, Any]]],
    *,
    where: Sequence[sa.ColumnElement[bool]] = (),
    values: dict[str, Any] | None = None,
) -> list[Event] | None:
    """Add several events with one seq allocation: one UPDATE … RETURNING for all of them.

    `where` and `values` extend that UPDATE, so a caller can fence and save its progress in the same
    statement; when `where` matches no row, nothing is added and the answer is None.
    """
    allocated = (
        await session.execute(
            sa.update(Execution)
            .where(Execution.id == execution_id, *where)
            .values(last_seq=Execution.last_seq + len(items), **(values or {}))
            .returning(Execution.last_seq),
            execution_options={"synchronize_session": False},
        )
    ).scalar_one_or_none()
    if allocated is None:
        return None
    now = utcnow()
    first = allocated - len(items) + 1
    events = [
        Event(execution_id=execution_id, seq=first + n, type=type_, payload=payload, created_at=now)
        for n, (type_, payload) in enumerate(items)
    ]
    session.add_all(events)
    for event in events:
        if event.type in WEBHOOK_EVENT_TYPES:  # one set lookup for every other event: the agent's hot path
            # The webhook outbox row commits with the event (and the final state beside it), or neither does.
            await enqueue_for_event(session, event)
        message = event_message(event)
        publish_after_commit(session, execution_channel(execution_id), message)
        event_after_commit(session, message)
    return events


async def events_after(
    session: AsyncSession, execution_id: str, after_seq: int = 0, limit: int | None = None
) -> list[Event]:
    rows = await session.scalars(
        sa.select(Event)
        .where(Event.execution_id == execution_id, Event.seq > after_seq)
        .order_by(Event.seq)
        .limit(limit)
    )
    return list(rows)
