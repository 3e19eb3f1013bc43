"""Events: rows first, messages second. Each carries a per-execution `seq`."""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncSession

from core.bus import execution_channel
from core.db import event_after_commit, insert_for, publish_after_commit
from core.direct import DirectCursor, DirectStatement, run_direct
from core.models import EVENTS, EXECUTIONS, Event, utcnow
from core.webhooks import WEBHOOK_EVENT_TYPES, enqueue_for_event

_INSERT_EVENTS = DirectStatement(sa.insert(EVENTS))


@dataclass(frozen=True, slots=True)
class AddedEvent:
    """An event added in this transaction, as its row holds it. Plain values: an ORM `Event` costs more to make
    than the statement that inserted its row, on every agent step."""

    execution_id: str
    seq: int
    type: str
    payload: dict[str, Any]
    created_at: datetime


def event_message(event: Event | AddedEvent) -> dict[str, Any]:
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
) -> AddedEvent:
    """Add an event in the caller's transaction; it is published once that commits."""
    added = await append_events(session, execution_id, [(type_, payload or {})])
    assert added is not None  # no condition: the row is there (its foreign key says so)
    return added[0]


def seq_allocation(*where: sa.ColumnElement[bool], **values: Any) -> DirectStatement:
    """The UPDATE … RETURNING that gives a batch of events their seqs, built once and run with parameters
    `execution_id`, `count` and those of `where` and `values` (bind parameters).

    `where` and `values` extend it, so a caller can fence its claim and save its progress in the same
    statement. Built once because building it costs more than running it, on every agent step.
    """
    columns = EXECUTIONS.c
    return DirectStatement(
        sa.update(EXECUTIONS)
        .where(columns.id == sa.bindparam("execution_id"), *where)
        .values(last_seq=columns.last_seq + sa.bindparam("count", type_=sa.Integer()), **values)
        .returning(columns.last_seq)
    )


_ALLOCATE = seq_allocation()


# A companion's table, its columns and its conflict index: what its statements are built from (and cached by).
_Shape = tuple[sa.Table, tuple[str, ...], tuple[str, ...]]


@dataclass(frozen=True)
class Companion:
    """A row of another table written with a batch of events, only when their allocation matched (an agent
    step's tool call, its effect): inserted, or with `conflict` (the columns of a unique index) updated where
    one exists."""

    table: sa.Table
    row: dict[str, Any]
    conflict: tuple[str, ...] = ()

    @property
    def shape(self) -> _Shape:
        return self.table, tuple(self.row), self.conflict


def _companion_insert(dialect: str, shape: _Shape, source: Any) -> Any:
    table, names, conflict = shape
    insert = insert_for(dialect, table)
    statement = insert.from_select(names, source) if source is not None else insert
    if not conflict:
        return statement
    return statement.on_conflict_do_update(
        index_elements=list(conflict), set_={name: insert.excluded[name] for name in names if name not in conflict}
    )


@functools.cache
def _allocate_and_insert(
    allocation: DirectStatement, count: int, companions: tuple[_Shape, ...]
) -> DirectStatement:
    """PostgreSQL: `allocation` as a data-modifying CTE and `count` events inserted from what it returns, in one
    statement, with the rows of `companions` (their shapes) only when the allocation matched. Parameters as the
    allocation's, plus `at`, `type_<n>`, `payload_<n>` for each event and `c<i>_<column>` for each companion."""
    allocated = allocation.statement.cte("allocated")
    columns = EVENTS.c
    rows = [
        sa.select(
            sa.bindparam("execution_id", type_=columns.execution_id.type),
            allocated.c.last_seq - (count - 1 - n),
            sa.bindparam(f"type_{n}", type_=columns.type.type),
            sa.bindparam(f"payload_{n}", type_=columns.payload.type),
            sa.bindparam("at", type_=columns.created_at.type),
        ).select_from(allocated)
        for n in range(count)
    ]
    source = rows[0] if count == 1 else sa.union_all(*rows)
    statement = (
        sa.insert(EVENTS)
        .from_select(["execution_id", "seq", "type", "payload", "created_at"], source)
        .returning(columns.seq)
    )
    for i, shape in enumerate(companions):
        table, names, _conflict = shape
        values = sa.select(*(sa.bindparam(f"c{i}_{name}", type_=table.c[name].type) for name in names))
        written = _companion_insert("postgresql", shape, values.select_from(allocated))
        statement = statement.add_cte(written.cte(f"companion_{i}"))
    return DirectStatement(statement)


@functools.cache
def _companion_statement(dialect: str, shape: _Shape) -> DirectStatement:
    return DirectStatement(_companion_insert(dialect, shape, None))


async def write_row(session: AsyncSession, companion: Companion) -> None:
    """Write a companion's row on its own, in the caller's transaction (a statement built once per shape)."""
    statement = _companion_statement(session.get_bind().dialect.name, companion.shape)
    await run_direct(session, lambda cursor: cursor.execute(statement, companion.row))


async def append_events(
    session: AsyncSession,
    execution_id: str,
    items: Sequence[tuple[str, dict[str, Any]]],
    *,
    allocation: DirectStatement = _ALLOCATE,
    parameters: dict[str, Any] | None = None,
    companions: Sequence[Companion] = (),
) -> list[AddedEvent] | None:
    """Add several events with one seq allocation (see `seq_allocation`) for all of them, and with them the rows
    of `companions`. On PostgreSQL that is one statement, whatever the number of events and companions.

    When the allocation's conditions match no row, nothing is added and the answer is None.
    """
    bound = {"execution_id": execution_id, "count": len(items), **(parameters or {})}
    dialect = session.get_bind().dialect.name
    if dialect != "postgresql":
        now = utcnow()

        def write(cursor: DirectCursor) -> list[dict[str, Any]] | None:
            allocated = cursor.execute(allocation, bound)
            if not allocated:
                return None
            for companion in companions:
                cursor.execute(_companion_statement(dialect, companion.shape), companion.row)
            rows = _rows(execution_id, allocated[0][0] - len(items) + 1, items, now)
            cursor.executemany(_INSERT_EVENTS, rows)
            return rows

        # One call to the driver for the allocation, the companions and the events.
        written = await run_direct(session, write)
        return None if written is None else await _announce(session, written)
    # One statement, one round trip: the allocation, the rows and the companions together.
    now = utcnow()
    for n, (type_, payload) in enumerate(items):
        bound[f"type_{n}"], bound[f"payload_{n}"] = type_, payload
    for i, companion in enumerate(companions):
        bound.update({f"c{i}_{name}": value for name, value in companion.row.items()})
    statement = _allocate_and_insert(allocation, len(items), tuple(companion.shape for companion in companions))
    bound["at"] = now
    seqs = await run_direct(session, lambda cursor: cursor.execute(statement, bound))
    first = min((seq for (seq,) in seqs), default=None)
    if first is None:
        return None
    return await _announce(session, _rows(execution_id, first, items, now))


async def add_numbered_events(
    session: AsyncSession, execution_id: str, first: int, items: Sequence[tuple[str, dict[str, Any]]]
) -> list[AddedEvent]:
    """Add events whose seqs the caller has already taken from `executions.last_seq` in its own statement
    (a claim's UPDATE, a new execution's INSERT), `first` onwards: one statement fewer than `append_events`."""
    rows = _rows(execution_id, first, items, utcnow())
    # Core, one executemany: the ORM's unit of work would insert them one by one at the next flush.
    await run_direct(session, lambda cursor: cursor.executemany(_INSERT_EVENTS, rows))
    return await _announce(session, rows)


async def announce_events(
    session: AsyncSession,
    execution_id: str,
    first: int,
    items: Sequence[tuple[str, dict[str, Any]]],
    at: datetime,
) -> list[AddedEvent]:
    """Events whose rows the caller's own statement inserted (seqs `first` onwards, `created_at` = `at`): their
    webhooks and their publishing after commit, as for events added here."""
    return await _announce(session, _rows(execution_id, first, items, at))


def _rows(
    execution_id: str, first: int, items: Sequence[tuple[str, dict[str, Any]]], now: datetime
) -> list[dict[str, Any]]:
    return [
        {"execution_id": execution_id, "seq": first + n, "type": type_, "payload": payload, "created_at": now}
        for n, (type_, payload) in enumerate(items)
    ]


async def _announce(session: AsyncSession, rows: list[dict[str, Any]]) -> list[AddedEvent]:
    """Queue the webhooks the events call for, and their publishing after commit."""
    events = [AddedEvent(**row) for row in rows]
    for event in events:
        if event.type in WEBHOOK_EVENT_TYPES:  # one set lookup for every other event: the agent's hot path
            # The webhook outbox row commits with the event (and the final state beside it), or neither does.
            await enqueue_for_event(session, event)
        message = event_message(event)
        publish_after_commit(session, execution_channel(event.execution_id), message)
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
