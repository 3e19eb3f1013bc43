"""Events: rows first, messages second. Each carries a per-execution `seq`."""

from __future__ import annotations

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
    seq = (
        await session.execute(
            sa.update(Execution)
            .where(Execution.id == execution_id)
            .values(last_seq=Execution.last_seq + 1)
            .returning(Execution.last_seq),
            execution_options={"synchronize_session": False},
        )
    ).scalar_one()
    event = Event(execution_id=execution_id, seq=seq, type=type_, payload=payload or {}, created_at=utcnow())
    session.add(event)
    if type_ in WEBHOOK_EVENT_TYPES:  # one set lookup for every other event: this is the agent's hot path
        # The webhook outbox row commits with the event (and the final state beside it), or neither does.
        await enqueue_for_event(session, event)
    message = event_message(event)
    publish_after_commit(session, execution_channel(execution_id), message)
    event_after_commit(session, message)
    return event


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
