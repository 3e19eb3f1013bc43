"""PostgreSQL: many writers at once, each statement a round trip. Claims skip rows another transaction is
claiming (FOR UPDATE SKIP LOCKED); creates count a key's slots under its row lock (`vouch_slot_free`, migration
0006); sign-ins take advisory locks. On the hot paths a row and its events are written by one statement (a
data-modifying CTE), and a transaction of one statement commits by itself: round trips saved (bench/README.md)."""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncSession

from core._sqlalchemy_shortcuts import DirectStatement, run_alone, run_direct
from core.backends.base import Appended, Backend, Companion, SelectT, Shape, companion_insert, event_rows
from core.models import EVENTS, EXECUTIONS, UTCDateTime, utcnow
from core.vocabulary import EventType

_EVENT_COLUMNS = ["execution_id", "seq", "type", "payload", "created_at"]


@functools.cache
def _slot_free(statuses: tuple[str, ...]) -> sa.ColumnElement[bool]:
    return sa.func.vouch_slot_free(
        sa.bindparam("key_id", type_=sa.String()),
        sa.bindparam("active_statuses", list(statuses), type_=postgresql.ARRAY(sa.String())),
        sa.bindparam("slot_limit", type_=sa.Integer()),
        type_=sa.Boolean(),
    )


@functools.cache
def _claiming_with_event(claiming: DirectStatement) -> DirectStatement:
    """`claiming` and the claim's event in one statement, a data-modifying CTE. Returns as `claiming`."""
    claimed = claiming.statement.cte("claimed")
    started = sa.case(
        (claimed.c.lease_epoch == 1, EventType.EXECUTION_STARTED.value), else_=EventType.EXECUTION_RESUMED.value
    )
    event = sa.select(
        claimed.c.id,
        claimed.c.last_seq,
        started,
        sa.bindparam("claim_payload", type_=EVENTS.c.payload.type),
        sa.bindparam("now", type_=UTCDateTime()),
    )
    logged = sa.insert(EVENTS).from_select(_EVENT_COLUMNS, event).cte("logged")
    return DirectStatement(sa.select(*claimed.c).add_cte(logged))


def _created_with_event(insert: sa.Insert) -> DirectStatement:
    """The new execution's `insert` and its `execution.created` event in one statement, a data-modifying CTE:
    one round trip fewer on the path every create takes."""
    created = insert.cte("created")
    event = sa.select(
        created.c.id,
        sa.literal(1, sa.Integer()),
        sa.bindparam("event_type", type_=EVENTS.c.type.type),
        sa.bindparam("event_payload", type_=EVENTS.c.payload.type),
        sa.bindparam("created_at", type_=EXECUTIONS.c.created_at.type),
    ).select_from(created)
    return DirectStatement(sa.insert(EVENTS).from_select(_EVENT_COLUMNS, event).returning(EVENTS.c.execution_id))


@functools.cache
def _allocate_and_insert(allocation: DirectStatement, count: int, companions: tuple[Shape, ...]) -> DirectStatement:
    """`allocation` as a data-modifying CTE and `count` events inserted from what it returns, in one statement,
    with the rows of `companions` (their shapes) only when the allocation matched; returns what the allocation
    returns. Parameters as the allocation's, plus `at`, `type_<n>`, `payload_<n>` for each event and
    `c<i>_<column>` for each companion."""
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
    logged = sa.insert(EVENTS).from_select(_EVENT_COLUMNS, source).cte("logged")
    # What the allocation returned, as it returned it: a data-modifying CTE runs whether or not it is read.
    statement = sa.select(*allocated.c).add_cte(logged)
    for i, shape in enumerate(companions):
        table, names, _conflict = shape
        values = sa.select(*(sa.bindparam(f"c{i}_{name}", type_=table.c[name].type) for name in names))
        written = companion_insert(postgresql.insert(table), shape, values.select_from(allocated))
        statement = statement.add_cte(written.cte(f"companion_{i}"))
    return DirectStatement(statement, sets_from_parameters=allocation.sets_from_parameters)


class PostgresBackend(Backend):
    name = "postgresql"
    writes_alone = True

    def insert(self, table: Any) -> postgresql.Insert:
        return postgresql.insert(table)

    def skip_locked(self, query: SelectT) -> SelectT:
        return query.with_for_update(skip_locked=True)

    async def begin_writing(self, session: AsyncSession) -> None:
        return  # rows are locked one by one, as they are written: there is no database-wide lock to wait for

    async def commit_alone(self, session: AsyncSession) -> bool:
        await session.connection(execution_options={"isolation_level": "AUTOCOMMIT"})
        return True

    def slot_count_serialised(self, session: AsyncSession) -> bool:
        return True  # `vouch_slot_free` locks the key's row before it counts, in any transaction

    async def take_turns(self, session: AsyncSession, locks: Sequence[tuple[int, int]]) -> None:
        # Each lock is a statement of its own: what follows takes its snapshot after the waits (READ COMMITTED),
        # and so sees what whoever held the lock before committed.
        for namespace, key in locks:
            await session.execute(sa.select(sa.func.pg_advisory_xact_lock(namespace, key)))

    def slot_free(self, statuses: tuple[str, ...]) -> sa.ColumnElement[bool]:
        return _slot_free(statuses)

    def claim_statement(self, claiming: DirectStatement) -> DirectStatement:
        return _claiming_with_event(claiming)

    def create_statement(self, insert: sa.Insert) -> DirectStatement:
        return _created_with_event(insert)

    async def write_taken_events(self, session: AsyncSession, rows: list[dict[str, Any]]) -> None:
        return  # the claim's or create's own statement wrote them (`claim_statement`, `create_statement`)

    def microseconds_between(self, start: sa.ColumnElement[Any], end: sa.ColumnElement[Any]) -> sa.ColumnElement[int]:
        # timestamptz keeps microseconds: the interval's epoch is exact in numeric.
        seconds = sa.cast(sa.extract("epoch", end - start), sa.Numeric())
        return sa.cast(sa.func.round(seconds * 1_000_000), sa.BigInteger())

    def floor(self, value: sa.ColumnElement[Any]) -> sa.ColumnElement[int]:
        return sa.cast(sa.func.floor(value), sa.BigInteger())  # a cast alone would round

    def percentiles(
        self, rows: sa.Subquery, value: str, groups: Sequence[str], fractions: Sequence[float]
    ) -> sa.Select[Any]:
        keys = [rows.c[name] for name in groups]
        columns = [
            sa.func.percentile_cont(fraction).within_group(rows.c[value]).label(f"p{index}")
            for index, fraction in enumerate(fractions)
        ]
        return sa.select(*keys, *columns).group_by(*keys)

    async def append_events(
        self,
        session: AsyncSession,
        execution_id: str,
        items: Sequence[tuple[str, Mapping[str, Any]]],
        allocation: DirectStatement,
        bound: dict[str, Any],
        companions: Sequence[Companion],
    ) -> Appended | None:
        # One statement, one round trip: the allocation, the rows and the companions together.
        statement, now = _appending(items, allocation, bound, companions)
        allocated = await run_direct(session, lambda cursor: cursor.execute(statement, bound))
        return _appended(execution_id, items, allocated, now)

    async def append_events_alone(
        self,
        connection: AsyncConnection,
        execution_id: str,
        items: Sequence[tuple[str, Mapping[str, Any]]],
        allocation: DirectStatement,
        bound: dict[str, Any],
        companions: Sequence[Companion],
    ) -> Appended | None:
        statement, now = _appending(items, allocation, bound, companions)
        return _appended(execution_id, items, await run_alone(connection, statement, bound), now)


def _appending(
    items: Sequence[tuple[str, Mapping[str, Any]]],
    allocation: DirectStatement,
    bound: dict[str, Any],
    companions: Sequence[Companion],
) -> tuple[DirectStatement, datetime]:
    """The statement that appends `items` with `companions`, its parameters added to `bound`, and its time."""
    for n, (type_, payload) in enumerate(items):
        bound[f"type_{n}"], bound[f"payload_{n}"] = type_, payload
    for i, companion in enumerate(companions):
        bound.update({f"c{i}_{name}": value for name, value in companion.row.items()})
    bound["at"] = now = utcnow()
    return _allocate_and_insert(allocation, len(items), tuple(companion.shape for companion in companions)), now


def _appended(
    execution_id: str, items: Sequence[tuple[str, Mapping[str, Any]]], allocated: list[tuple[Any, ...]], now: datetime
) -> Appended | None:
    if not allocated:
        return None
    last_seq, webhook_url, verdict_state, suite_id, *more = allocated[0]
    rows = event_rows(execution_id, last_seq - len(items) + 1, items, now)
    return Appended(rows, webhook_url, verdict_state, suite_id, tuple(more))


POSTGRESQL = PostgresBackend()
