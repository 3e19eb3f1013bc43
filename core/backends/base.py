"""The one interface to what differs between SQLite and PostgreSQL, and what both implementations share.

Feature modules never test which database they run on: they ask the session's backend (`backend_of`, or a
`Database`'s `backend`) for the statement or the step that differs, and it answers for its database.
"""

from __future__ import annotations

import functools
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, NamedTuple, TypeVar

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, AsyncSession

from core._sqlalchemy_shortcuts import DirectStatement
from core.wal_checkpoints import WalCheckpoints

# A SELECT, whatever its columns: what `skip_locked` gives back.
SelectT = TypeVar("SelectT", bound=sa.Select[Any])

# An INSERT in the database's own form: both spell ON CONFLICT alike (`on_conflict_do_update`, `excluded`).
Insert = sqlite.Insert | postgresql.Insert

# A companion's table, its columns and its conflict index: what its statements are built from (and cached by).
Shape = tuple[sa.Table, tuple[str, ...], tuple[str, ...]]


@dataclass(frozen=True)
class Companion:
    """A row of another table written with a batch of events, only when their allocation matched (an agent
    step's tool call, its effect): inserted, or with `conflict` (the columns of a unique index) updated where
    one exists."""

    table: sa.Table
    row: dict[str, Any]
    conflict: tuple[str, ...] = ()

    @property
    def shape(self) -> Shape:
        return self.table, tuple(self.row), self.conflict


class Appended(NamedTuple):
    """The event rows an allocation's batch wrote, and what the allocation's row said of the execution's webhook,
    verdict and suite (`seq_allocation` returns them): enough to know that nothing else is due without reading
    the row again."""

    rows: list[dict[str, Any]]
    webhook_url: str | None
    verdict_state: str | None
    suite_id: str | None
    # What the allocation returned after those, as the driver gave it (`seq_allocation`'s `returning`).
    more: tuple[Any, ...] = ()


class Backend(ABC):
    """What differs between the databases Vouch runs on. One instance per database (`core.backends`)."""

    name: str
    # Whether a statement may run outside any session, committing by itself (`core.db.Database.alone`).
    writes_alone: bool = False

    def wal_checkpoints(self, engine: AsyncEngine, url: str) -> WalCheckpoints | None:
        """What checkpoints the write-ahead log of `url`'s database off the event loop, where this process must
        (SQLite's file: core/wal_checkpoints.py); None where the database does that itself."""
        return None

    @abstractmethod
    def insert(self, table: Any) -> Insert:
        """An INSERT into `table` (a Table or a mapped class) that can take an ON CONFLICT clause."""

    @abstractmethod
    def skip_locked(self, query: SelectT) -> SelectT:
        """`query` for a claim: where rows are locked one by one, it skips those another transaction is
        claiming (FOR UPDATE SKIP LOCKED); where writers take turns on the whole database, it is unchanged."""

    @abstractmethod
    async def begin_writing(self, session: AsyncSession) -> None:
        """Where a write transaction waits for the database's one write lock, begin `session`'s now, so that
        a clock read after this is later than every commit before it."""

    @abstractmethod
    async def commit_alone(self, session: AsyncSession) -> bool:
        """Make `session`'s next statement commit by itself, if the database can; says whether it did. Only
        through `core.db.commits_alone`, which knows whether the session may."""

    @abstractmethod
    def slot_count_serialised(self, session: AsyncSession) -> bool:
        """Whether `slot_free`, counted in `session`, keeps out another create's count until this one commits."""

    @abstractmethod
    async def take_turns(self, session: AsyncSession, locks: Sequence[tuple[int, int]]) -> None:
        """Make this transaction the only one holding each of `locks` (a namespace, a key) until it commits,
        each taken by a statement of its own, in order. A no-op where writers already take turns."""

    @abstractmethod
    def slot_free(self, statuses: tuple[str, ...]) -> sa.ColumnElement[bool]:
        """The condition of a create's INSERT: the API key (parameter `key_id`) has fewer than `slot_limit`
        executions in `statuses`, counted so that two creates of the key cannot count at the same time."""

    @abstractmethod
    def claim_statement(self, claiming: DirectStatement) -> DirectStatement:
        """The statement to run for `claiming` (an UPDATE … RETURNING id, lease_epoch, last_seq, then what the
        runner starts from): where it can, with the claim's event (`execution.started` at the first epoch, else
        `execution.resumed`; parameters `claim_payload`, `now`) written by the same statement. Returns as
        `claiming`."""

    @abstractmethod
    def create_statement(self, insert: sa.Insert) -> DirectStatement:
        """The statement to run for a new execution's `insert` (… RETURNING its id): where it can, with its first
        event (seq 1; parameters `event_type`, `event_payload`, `created_at`) written by the same statement."""

    @abstractmethod
    async def write_taken_events(self, session: AsyncSession, rows: list[dict[str, Any]]) -> None:
        """Write the event `rows` whose seqs a claim or create statement took, unless that statement (as
        `claim_statement` or `create_statement` made it) wrote them itself."""

    def companion_statement(self, shape: Shape) -> DirectStatement:
        """A companion row's INSERT (or upsert) on its own, built once per shape."""
        return _companion_statement(self, shape)

    @abstractmethod
    def microseconds_between(self, start: sa.ColumnElement[Any], end: sa.ColumnElement[Any]) -> sa.ColumnElement[int]:
        """Whole microseconds from the timestamp `start` to `end`, exactly (as Python subtracts two datetimes)."""

    @abstractmethod
    def floor(self, value: sa.ColumnElement[Any]) -> sa.ColumnElement[int]:
        """The largest whole number not above `value` (a number >= 0), as an integer."""

    @abstractmethod
    def percentiles(
        self, rows: sa.Subquery, value: str, groups: Sequence[str], fractions: Sequence[float]
    ) -> sa.Select[Any]:
        """Per group of `rows` (its columns `groups`), the continuous percentiles of its column `value`
        (linear interpolation between the closest ranks, as PostgreSQL's percentile_cont): columns `groups`,
        then one named `p<i>` per fraction `fractions[i]`."""

    @abstractmethod
    async def append_events(
        self,
        session: AsyncSession,
        execution_id: str,
        items: Sequence[tuple[str, Mapping[str, Any]]],
        allocation: DirectStatement,
        bound: dict[str, Any],
        companions: Sequence[Companion],
    ) -> Appended | None:
        """Run `allocation` with `bound` and, when it matched, write `companions` and the events `items` with
        the seqs it gave; the event rows written (with the allocation's row), or None when it matched no row."""


    async def append_events_alone(
        self,
        connection: AsyncConnection,
        execution_id: str,
        items: Sequence[tuple[str, Mapping[str, Any]]],
        allocation: DirectStatement,
        bound: dict[str, Any],
        companions: Sequence[Companion],
    ) -> Appended | None:
        """`append_events` as one statement committing by itself on `connection` (`writes_alone`)."""
        raise NotImplementedError(f"{self.name} writes in transactions only")


def event_rows(
    execution_id: str, first: int, items: Sequence[tuple[str, Mapping[str, Any]]], now: datetime
) -> list[dict[str, Any]]:
    """The rows of events `items`, seqs `first` onwards."""
    return [
        {"execution_id": execution_id, "seq": first + n, "type": type_, "payload": payload, "created_at": now}
        for n, (type_, payload) in enumerate(items)
    ]


@functools.cache
def _companion_statement(backend: Backend, shape: Shape) -> DirectStatement:
    return DirectStatement(companion_insert(backend.insert(shape[0]), shape, None))


def companion_insert(insert: Insert, shape: Shape, source: Any) -> Any:
    """The companion's INSERT (from `source`, a SELECT, when given), an upsert when it has a conflict index."""
    _table, names, conflict = shape
    statement = insert.from_select(names, source) if source is not None else insert
    if not conflict:
        return statement
    return statement.on_conflict_do_update(
        index_elements=list(conflict), set_={name: insert.excluded[name] for name in names if name not in conflict}
    )
