"""Events: rows first, messages second. Each carries a per-execution `seq`."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any, Literal, overload

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncSession

from core import event_payloads as p
from core._sqlalchemy_shortcuts import DirectStatement, run_direct
from core.backends import backend_of
from core.backends.base import Appended, event_rows
from core.backends.base import Companion as Companion
from core.bus import execution_channel
from core.db import Alone, Database, event_after_commit, publish_after_commit
from core.event_messages import AddedEvent, event_message, news_of
from core.models import EXECUTIONS, Event
from core.trace_outbox import queue_spans_for_event
from core.vocabulary import EventType
from core.webhooks import WEBHOOK_EVENT_TYPES, WebhookHint, enqueue_for_event, quiet, suite_slot_freed


@overload
async def append_event(
    session: AsyncSession,
    execution_id: str,
    type_: Literal[EventType.EXECUTION_CREATED],
    payload: p.ExecutionCreated,
) -> AddedEvent: ...


@overload
async def append_event(
    session: AsyncSession,
    execution_id: str,
    type_: Literal[EventType.EXECUTION_STARTED, EventType.EXECUTION_RESUMED],
    payload: p.ExecutionClaimed,
) -> AddedEvent: ...


@overload
async def append_event(
    session: AsyncSession,
    execution_id: str,
    type_: Literal[EventType.EXECUTION_UPDATED],
    payload: p.ExecutionUpdated,
) -> AddedEvent: ...


@overload
async def append_event(
    session: AsyncSession,
    execution_id: str,
    type_: Literal[EventType.EXECUTION_COMPLETED],
    payload: p.ExecutionCompleted,
) -> AddedEvent: ...


@overload
async def append_event(
    session: AsyncSession,
    execution_id: str,
    type_: Literal[EventType.EXECUTION_FAILED],
    payload: p.ExecutionFailed,
) -> AddedEvent: ...


@overload
async def append_event(
    session: AsyncSession,
    execution_id: str,
    type_: Literal[EventType.EXECUTION_REJECTED],
    payload: p.ExecutionRejected,
) -> AddedEvent: ...


@overload
async def append_event(
    session: AsyncSession,
    execution_id: str,
    type_: Literal[EventType.EXECUTION_CANCELLED],
    payload: p.ExecutionCancelled,
) -> AddedEvent: ...


@overload
async def append_event(
    session: AsyncSession,
    execution_id: str,
    type_: Literal[EventType.CHECKPOINT_AWAITING_REVIEW],
    payload: p.CheckpointAwaitingReview,
) -> AddedEvent: ...


@overload
async def append_event(
    session: AsyncSession,
    execution_id: str,
    type_: Literal[EventType.CHECKPOINT_DECIDED],
    payload: p.CheckpointDecided,
) -> AddedEvent: ...


@overload
async def append_event(
    session: AsyncSession,
    execution_id: str,
    type_: Literal[EventType.CHECKPOINT_REVISION_REQUESTED],
    payload: p.CheckpointRevisionRequested,
) -> AddedEvent: ...


@overload
async def append_event(
    session: AsyncSession,
    execution_id: str,
    type_: Literal[EventType.REVIEW_REMINDER_SENT, EventType.REVIEW_ESCALATED],
    payload: p.ReviewTimerFired,
) -> AddedEvent: ...


@overload
async def append_event(
    session: AsyncSession,
    execution_id: str,
    type_: Literal[EventType.REVIEW_DEADLINE_PASSED],
    payload: p.ReviewDeadlinePassed,
) -> AddedEvent: ...


@overload
async def append_event(
    session: AsyncSession,
    execution_id: str,
    type_: Literal[EventType.MAIL_FAILED],
    payload: p.MailFailed,
) -> AddedEvent: ...


@overload
async def append_event(
    session: AsyncSession,
    execution_id: str,
    type_: Literal[EventType.MODEL_REQUEST],
    payload: p.ModelRequest,
) -> AddedEvent: ...


@overload
async def append_event(
    session: AsyncSession,
    execution_id: str,
    type_: Literal[EventType.AGENT_MESSAGE],
    payload: p.AgentMessage,
) -> AddedEvent: ...


@overload
async def append_event(
    session: AsyncSession,
    execution_id: str,
    type_: Literal[EventType.TOOL_CALL],
    payload: p.ToolCallPayload,
) -> AddedEvent: ...


@overload
async def append_event(
    session: AsyncSession,
    execution_id: str,
    type_: Literal[EventType.TOOL_RESULT],
    payload: p.ToolResult,
) -> AddedEvent: ...


@overload
async def append_event(
    session: AsyncSession,
    execution_id: str,
    type_: Literal[EventType.EXECUTION_SCORED],
    payload: p.ExecutionScored,
) -> AddedEvent: ...


# One overload per event type (core/event_payloads.py): mypy checks each payload against its type.
async def append_event(
    session: AsyncSession, execution_id: str, type_: EventType, payload: Mapping[str, Any]
) -> AddedEvent:
    """Add an event in the caller's transaction; it is published once that commits."""
    return await append_any_event(session, execution_id, type_, payload)


async def append_any_event(
    session: AsyncSession, execution_id: str, type_: str, payload: Mapping[str, Any] | None = None
) -> AddedEvent:
    """`append_event` for any type and payload, unchecked: the log itself knows no types (tests, tools)."""
    added = await append_events_returning(session, execution_id, [(type_, payload or {})], allocation=_ALLOCATE)
    assert added is not None  # no condition: the row is there (its foreign key says so)
    return added[0][0]


def seq_allocation(
    *where: sa.ColumnElement[bool], returning: tuple[sa.ColumnElement[Any], ...] = (), **values: Any
) -> DirectStatement:
    """The UPDATE … RETURNING that gives a batch of events their seqs, built once and run with parameters
    `execution_id`, `count` and those of `where` and `values` (bind parameters).

    `where` and `values` extend it, so a caller can fence its claim and save its progress in the same
    statement; what it returns after its own columns, `returning` (`Appended.more`). Built once because building
    it costs more than running it, on every agent step.
    """
    columns = EXECUTIONS.c
    return DirectStatement(
        sa.update(EXECUTIONS)
        .where(columns.id == sa.bindparam("execution_id"), *where)
        .values(last_seq=columns.last_seq + sa.bindparam("count", type_=sa.Integer()), **values)
        # With the new last seq, what tells whether the events may call for a webhook, or end a suite's run
        # (`enqueue_for_event`).
        .returning(columns.last_seq, columns.webhook_url, columns.verdict_state, columns.suite_id, *returning)
    )


_ALLOCATE = seq_allocation()


async def write_row(session: AsyncSession, companion: Companion) -> None:
    """Write a companion's row on its own, in the caller's transaction (a statement built once per shape)."""
    statement = backend_of(session).companion_statement(companion.shape)
    await run_direct(session, lambda cursor: cursor.execute(statement, companion.row))


async def append_events(
    session: AsyncSession,
    execution_id: str,
    items: Sequence[p.TypedEvent],
    *,
    allocation: DirectStatement = _ALLOCATE,
    parameters: dict[str, Any] | None = None,
    companions: Sequence[Companion] = (),
) -> list[AddedEvent] | None:
    """Add several events with one seq allocation (see `seq_allocation`) for all of them, and with them the rows
    of `companions`. On PostgreSQL that is one statement, whatever the number of events and companions.

    When the allocation's conditions match no row, nothing is added and the answer is None.
    """
    appended = await append_events_returning(
        session, execution_id, items, allocation=allocation, parameters=parameters, companions=companions
    )
    return None if appended is None else appended[0]


async def append_events_returning(
    session: AsyncSession,
    execution_id: str,
    items: Sequence[tuple[str, Mapping[str, Any]]],
    *,
    allocation: DirectStatement,
    parameters: dict[str, Any] | None = None,
    companions: Sequence[Companion] = (),
) -> tuple[list[AddedEvent], tuple[Any, ...]] | None:
    """`append_events`, with what the allocation returned after its own columns (`seq_allocation`'s `returning`)."""
    bound = {"execution_id": execution_id, "count": len(items), **(parameters or {})}
    written = await backend_of(session).append_events(session, execution_id, items, allocation, bound, companions)
    if written is None:
        return None
    return await _announce(session, written.rows, _hint(written)), written.more


async def add_numbered_events(
    session: AsyncSession | Alone,
    execution_id: str,
    first: int,
    items: Sequence[p.TypedEvent],
    at: datetime,
) -> list[AddedEvent]:
    """Add events whose seqs the caller has already taken from `executions.last_seq` in its own statement
    (a claim's, a new execution's: the backend's `claim_statement`, `create_statement`, which may have written
    their rows already), `first` onwards, `created_at` = `at`: one statement fewer than `append_events`.
    After a statement written alone (`Database.alone`), that statement wrote them, and none calls for a webhook."""
    rows = event_rows(execution_id, first, items, at)
    if isinstance(session, Alone):
        if any(type_ in WEBHOOK_EVENT_TYPES for type_, _ in items):
            raise ValueError(f"{execution_id}: events that call for a webhook are written in a transaction")
        return _queue(session, [AddedEvent(**row) for row in rows])
    await backend_of(session).write_taken_events(session, rows)
    return await _announce(session, rows)


async def append_events_alone(
    db: Database,
    execution_id: str,
    items: Sequence[p.TypedEvent],
    *,
    allocation: DirectStatement,
    parameters: dict[str, Any],
    companions: Sequence[Companion] = (),
) -> list[AddedEvent] | None:
    """`append_events` as one statement that commits by itself, outside any session, where the backend writes that
    way (`Database.alone`: RuntimeError elsewhere). What the events call for is published after it."""
    async with db.alone() as alone:
        appended = await append_alone_returning(
            alone, execution_id, items, allocation=allocation, parameters=parameters, companions=companions
        )
        return None if appended is None else appended[0]


async def append_alone_returning(
    alone: Alone,
    execution_id: str,
    items: Sequence[p.TypedEvent],
    *,
    allocation: DirectStatement,
    parameters: dict[str, Any],
    companions: Sequence[Companion] = (),
) -> tuple[list[AddedEvent], tuple[Any, ...]] | None:
    """`append_events_alone` on the connection of a `Database.alone` block, with what the allocation returned after
    its own columns (`append_events_returning`); what the events call for goes out when the block ends.

    Nothing else can be written with it: the caller makes sure that none of `items` calls for a webhook or a trace
    export (`allocation` matching no row where one would be due: `QUIET`, with the traces off). One that does
    anyway raises, as a fault of the caller's, after the statement committed."""
    bound = {"execution_id": execution_id, "count": len(items), **parameters}
    backend, connection = alone.backend, alone.connection
    written = await backend.append_events_alone(connection, execution_id, items, allocation, bound, companions)
    if written is None:
        return None
    events = [AddedEvent(**row) for row in written.rows]
    for event in events:
        if event.type in WEBHOOK_EVENT_TYPES:
            if alone.traces or not quiet(_hint(written)):
                raise RuntimeError(f"{execution_id}: events committed alone call for a webhook or a trace export")
            suite_slot_freed(alone, event.type, written.suite_id)
    return _queue(alone, events), written.more


def _hint(written: Appended) -> WebhookHint:
    return WebhookHint(written.webhook_url, written.verdict_state, written.suite_id)


async def _announce(
    session: AsyncSession, rows: list[dict[str, Any]], hint: WebhookHint | None = None
) -> list[AddedEvent]:
    """Queue the webhooks the events call for, and their publishing after commit."""
    events = [AddedEvent(**row) for row in rows]
    for event in events:
        if event.type in WEBHOOK_EVENT_TYPES:  # one set lookup for every other event: the agent's hot path
            # The webhook outbox row commits with the event (and the final state beside it), or neither does.
            await enqueue_for_event(session, event, hint)
            # The same events end a run or decide a review: their spans' outbox row commits with them too.
            queue_spans_for_event(session, event.execution_id, event.type, event.payload)
    return _queue(session, events)


def _queue(session: AsyncSession | Alone, events: list[AddedEvent]) -> list[AddedEvent]:
    """Queue the events' publishing after commit: each to the event sinks (the chat's rooms), and the batch's last
    seq on its execution's channel. That channel only tells its listeners to look again (the status cache, a wait
    for a decision): one short message a batch says it, where the whole of every event was encoded by the
    committer and decoded by every web process (issue 25)."""
    for event in events:
        event_after_commit(session, event_message(event))
    if events:
        last = events[-1]
        publish_after_commit(session, execution_channel(last.execution_id), news_of(last))
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
