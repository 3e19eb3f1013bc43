"""SQLite: one writer at a time. A write session begins with BEGIN IMMEDIATE (core/sqlite.py) and holds the
database's write lock until it commits, so claims need no row locks and counts no key locks; statements run
in-process, so writing an event by a statement of its own costs microseconds, not a round trip."""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import sqlite
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession

from core._sqlalchemy_shortcuts import DirectCursor, DirectStatement, run_direct
from core.backends.base import Appended, Backend, Companion, SelectT, event_rows
from core.models import EVENTS, EXECUTIONS, utcnow
from core.sql import one_of
from core.sqlite import sqlite_file
from core.wal_checkpoints import WalCheckpoints

_INSERT_EVENTS = DirectStatement(sa.insert(EVENTS))


@functools.cache
def _slot_free(statuses: tuple[str, ...]) -> sa.ColumnElement[bool]:
    active = (EXECUTIONS.c.api_key_id == sa.bindparam("key_id"), one_of(EXECUTIONS.c.status, statuses))
    limit = sa.bindparam("slot_limit", type_=sa.Integer())
    return sa.select(sa.func.count()).select_from(EXECUTIONS).where(*active).scalar_subquery() < limit


def _microseconds(moment: sa.ColumnElement[Any]) -> sa.ColumnElement[int]:
    """Microseconds since the epoch of a stored time: SQLite's date functions keep milliseconds only, so the
    whole seconds come from them and the microseconds from the text itself ("YYYY-MM-DD HH:MM:SS.ffffff")."""
    text = sa.cast(moment, sa.Text())
    seconds = sa.cast(sa.func.strftime("%s", sa.func.substr(text, 1, 19)), sa.Integer())
    return seconds * 1_000_000 + sa.cast(sa.func.substr(text, 21, 6), sa.Integer())


class SqliteBackend(Backend):
    name = "sqlite"

    def wal_checkpoints(self, engine: AsyncEngine, url: str) -> WalCheckpoints | None:
        path = sqlite_file(url)
        return WalCheckpoints(engine, path) if path is not None else None

    def insert(self, table: Any) -> sqlite.Insert:
        return sqlite.insert(table)

    def skip_locked(self, query: SelectT) -> SelectT:
        return query  # the claim's transaction holds the database's write lock: no other claim runs meanwhile

    async def begin_writing(self, session: AsyncSession) -> None:
        await session.connection()  # begins: BEGIN IMMEDIATE, after the in-process writers' queue

    async def commit_alone(self, session: AsyncSession) -> bool:
        return False  # BEGIN and COMMIT are calls into the library here, not round trips: nothing to save

    def slot_count_serialised(self, session: AsyncSession) -> bool:
        # Only a write session holds the lock from its first statement: a deferred (read) transaction would let
        # two creates count at once.
        return bool(session.get_bind().get_execution_options().get("vouch_write", False))

    async def take_turns(self, session: AsyncSession, locks: Sequence[tuple[int, int]]) -> None:
        return  # the write transaction already holds the database's write lock

    def slot_free(self, statuses: tuple[str, ...]) -> sa.ColumnElement[bool]:
        return _slot_free(statuses)

    def claim_statement(self, claiming: DirectStatement) -> DirectStatement:
        return claiming  # its event follows (`write_taken_events`)

    def create_statement(self, insert: sa.Insert) -> DirectStatement:
        return DirectStatement(insert)  # its event follows (`write_taken_events`)

    async def write_taken_events(self, session: AsyncSession, rows: list[dict[str, Any]]) -> None:
        # Core, one executemany: the ORM's unit of work would insert them one by one at the next flush.
        await run_direct(session, lambda cursor: cursor.executemany(_INSERT_EVENTS, rows))

    def microseconds_between(self, start: sa.ColumnElement[Any], end: sa.ColumnElement[Any]) -> sa.ColumnElement[int]:
        return _microseconds(end) - _microseconds(start)

    def floor(self, value: sa.ColumnElement[Any]) -> sa.ColumnElement[int]:
        return sa.cast(value, sa.Integer())  # truncates: the floor of a number >= 0 (floor() is optional here)

    def percentiles(
        self, rows: sa.Subquery, value: str, groups: Sequence[str], fractions: Sequence[float]
    ) -> sa.Select[Any]:
        # No percentile_cont here: each value's rank within its group (window functions), then per group the two
        # values around each fraction's position, interpolated.
        keys = [rows.c[name] for name in groups]
        ranked = sa.select(
            *keys,
            rows.c[value].label("value"),
            (sa.func.row_number().over(partition_by=keys, order_by=rows.c[value]) - 1).label("rank"),
            sa.func.count().over(partition_by=keys).label("n"),
        ).subquery("ranked")
        columns: list[sa.ColumnElement[Any]] = []
        for index, fraction in enumerate(fractions):
            position = sa.literal(fraction, sa.Float()) * (ranked.c.n - 1)
            below = sa.cast(position, sa.Integer())  # positions are never negative: truncation is floor
            low = sa.func.max(sa.case((ranked.c.rank == below, ranked.c.value)))
            high = sa.func.max(sa.case((ranked.c.rank == below + 1, ranked.c.value)))
            weight = sa.func.max(position - below)
            columns.append((low + weight * (sa.func.coalesce(high, low) - low)).label(f"p{index}"))
        ranked_keys = [ranked.c[name] for name in groups]
        return sa.select(*ranked_keys, *columns).group_by(*ranked_keys)

    async def append_events(
        self,
        session: AsyncSession,
        execution_id: str,
        items: Sequence[tuple[str, Mapping[str, Any]]],
        allocation: DirectStatement,
        bound: dict[str, Any],
        companions: Sequence[Companion],
    ) -> Appended | None:
        now = utcnow()

        def write(cursor: DirectCursor) -> Appended | None:
            allocated = cursor.execute(allocation, bound)
            if not allocated:
                return None
            last_seq, webhook_url, verdict_state, suite_id, *more = allocated[0]
            for companion in companions:
                cursor.execute(self.companion_statement(companion.shape), companion.row)
            rows = event_rows(execution_id, last_seq - len(items) + 1, items, now)
            cursor.executemany(_INSERT_EVENTS, rows)
            return Appended(rows, webhook_url, verdict_state, suite_id, tuple(more))

        # One call to the driver for the allocation, the companions and the events.
        return await run_direct(session, write)


SQLITE = SqliteBackend()
