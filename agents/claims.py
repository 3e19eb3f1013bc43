"""Claiming runnable executions with leases.

Runnable: `queued`, or `running` with no live lease (just approved, or its worker died).
How two workers never claim the same row is the backend's (core/backends: PostgreSQL skips rows another
worker is claiming; SQLite serialises writers with BEGIN IMMEDIATE, so a single UPDATE … RETURNING is atomic).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Dialect
from sqlalchemy.ext.asyncio import AsyncSession

from core._sqlalchemy_shortcuts import DirectStatement, run_alone, run_direct
from core.backends import Backend
from core.db import Alone, Database, commits_alone, one_of
from core.event_payloads import ExecutionClaimed, TypedEvent
from core.events import add_numbered_events
from core.model_profiles import EXTERNAL
from core.models import CHECKPOINTS, DECISIONS, EXECUTIONS, TOOL_CALLS, ToolCall, UTCDateTime, utcnow
from core.vocabulary import EventType

RUNNABLE = ("queued", "running")


class LeaseLost(Exception):
    """Another worker holds this execution now, or it left the running state."""


@dataclass(frozen=True)
class StepCall:
    """The call opened for the step at the offline agent's cursor (at its checkpoint, or by a worker that died), as
    the claim found it: `call` is None when the step has none yet."""

    cursor: int
    call: ToolCall | None


@dataclass(frozen=True)
class Entry:
    """What the runner needs to go on, handed back by the claim's own statement: the agent's state (None before
    the first claim made it) and the run's mode."""

    state: dict[str, Any] | None
    test_mode: str
    auto_detect_checkpoints: bool
    # How many of the caller's checkpoints wait to be passed (status pending), counted by the claim.
    caller_pending: int
    # The call of the step the run goes on with, when the claim could tell: None when the state has no cursor (not
    # the offline agent's, or not made yet) or when approvals edited the call's arguments (`take_edits` reads them).
    step_call: StepCall | None = None


@dataclass(frozen=True)
class Claim:
    execution_id: str
    epoch: int
    # Not part of what a claim is (two claims of one epoch are the same claim): what the runner starts from.
    entry: Entry | None = field(default=None, compare=False)


# A claim is still the execution's: the conditions every write of a run is fenced by, with bind parameters
# `claim_worker` and `claim_epoch` (ExecutionRunner.fenced), so that statements carrying them are built once.
CLAIM_HOLDS = (
    EXECUTIONS.c.worker_id == sa.bindparam("claim_worker"),
    EXECUTIONS.c.lease_epoch == sa.bindparam("claim_epoch"),
    EXECUTIONS.c.status == "running",
)


async def claim_next(db: Database, worker_id: str, lease_seconds: float) -> Claim | None:
    """The oldest runnable execution, claimed; None when there is none."""
    return await _claim(db, worker_id, lease_seconds, None)


async def claim_execution(db: Database, worker_id: str, lease_seconds: float, execution_id: str) -> Claim | None:
    """This execution, claimed if it is runnable (a wake-up named it); None when it is not, or no longer."""
    return await _claim(db, worker_id, lease_seconds, execution_id)


def _claiming(which: sa.ColumnElement[bool]) -> sa.Update:
    columns = EXECUTIONS.c
    return (
        sa.update(EXECUTIONS)
        .where(which)
        .values(
            status="running",
            worker_id=sa.bindparam("claimant"),
            lease_until=sa.bindparam("claimed_until"),
            lease_epoch=columns.lease_epoch + 1,
            started_at=sa.func.coalesce(columns.started_at, sa.bindparam("now", type_=UTCDateTime())),
            last_seq=columns.last_seq + 1,  # the seq of the claim's own event
        )
        .returning(columns.id, columns.lease_epoch, columns.last_seq, *_RETURNING)
    )


# Returned by the claim after (id, lease_epoch, last_seq): the runner's re-entry needs no statement of its own,
# and a run whose caller checkpoints are all passed (the usual resume) no read of them either.
_CALLER_PENDING = (
    sa.select(sa.func.count())
    .select_from(CHECKPOINTS)
    .where(
        # Spelled out: SQLite's RETURNING is rendered without table names, and a bare `id` in the subquery would
        # name the checkpoint's.
        sa.literal_column("checkpoints.execution_id") == sa.literal_column("executions.id"),
        sa.literal_column("checkpoints.status") == "pending",
        sa.literal_column("checkpoints.origin") == "caller",
    )
    .scalar_subquery()
    .label("caller_pending")
)
_ENTRY_COLUMNS = (EXECUTIONS.c.agent_state, EXECUTIONS.c.test_mode, EXECUTIONS.c.auto_detect_checkpoints)


def _named(column: sa.Column[Any]) -> sa.ColumnElement[Any]:
    """`column` spelled out with its table's name: SQLite renders the RETURNING clause's columns without table
    names, its subqueries' conditions included, where `execution_id` could then name either of two tables."""
    return sa.literal_column(f"{column.table.name}.{column.name}", column.type)


# The step the offline agent takes next (agents/offline.py keeps it in its state as `cursor`); NULL in any other
# agent's state, which then finds no call below.
_CURSOR = _named(EXECUTIONS.c.agent_state)["cursor"].as_integer()
_AT_CURSOR = (
    _named(TOOL_CALLS.c.execution_id) == _named(EXECUTIONS.c.id),
    _named(TOOL_CALLS.c.step_index) == _CURSOR,
)
# The call opened for that step, if any: after an approval, the call it let through. Returned by the claim, so
# that the step after an approval reads nothing before its own statement (issue 25). A scalar subquery per
# column: SQLite's UPDATE … RETURNING can join nothing, and each is one lookup in the (execution_id, step_index) key.
# A call at the cursor is never finished (its record saves the step's progress with it): no result, error or
# finish time to hand back.
_STEP_CALL_COLUMNS = (
    TOOL_CALLS.c.id,
    TOOL_CALLS.c.tool,
    TOOL_CALLS.c.args,
    TOOL_CALLS.c.provider_call_id,
    TOOL_CALLS.c.proposed_args,
    TOOL_CALLS.c.status,
    TOOL_CALLS.c.started_at,
)
_STEP_CALL = tuple(
    sa.select(column).where(*_AT_CURSOR).scalar_subquery().label(f"step_call_{column.name}")
    for column in _STEP_CALL_COLUMNS
)
# Whether an approval edited that call's arguments: then `take_edits` reads the edits with the call, as before.
_STEP_EDITED = (
    sa.exists()
    .select_from(DECISIONS, CHECKPOINTS, TOOL_CALLS)
    .where(
        # The execution first: its (execution_id, position) key is the index this lookup runs on.
        _named(CHECKPOINTS.c.execution_id) == _named(EXECUTIONS.c.id),
        _named(CHECKPOINTS.c.tool_call_id) == _named(TOOL_CALLS.c.id),
        _named(DECISIONS.c.checkpoint_id) == _named(CHECKPOINTS.c.id),
        _named(DECISIONS.c.attempt) == _named(CHECKPOINTS.c.attempt),
        _named(DECISIONS.c.decision) == "approve",
        # A decision without edits may hold JSON null rather than SQL NULL (as `take_edits` knows): not an edit.
        sa.cast(_named(DECISIONS.c.edited_args), sa.Text()) != "null",
        *_AT_CURSOR,
    )
    .label("step_edited")
)
# What the claim returns after (id, lease_epoch, last_seq), and those columns' types (for their result processors).
_RETURNING = (*_ENTRY_COLUMNS, _CALLER_PENDING, _STEP_EDITED, *_STEP_CALL)
_RETURNED = (*_ENTRY_COLUMNS, _CALLER_PENDING, _STEP_EDITED, *_STEP_CALL_COLUMNS)


@functools.cache
def _processors(dialect: Dialect) -> tuple[Callable[[Any], Any] | None, ...]:
    """The result processors SQLAlchemy would apply to the returned columns (JSON, booleans, aware datetimes): the
    claim's rows come from the driver directly (core/_sqlalchemy_shortcuts.py)."""
    return tuple(column.type.dialect_impl(dialect).result_processor(dialect, None) for column in _RETURNED)


def _entry(dialect: Dialect, execution_id: str, raw: tuple[Any, ...]) -> Entry:
    stored, test_mode, auto, caller_pending, edited, *call = (
        value if process is None or value is None else process(value)
        for process, value in zip(_processors(dialect), raw, strict=True)
    )
    state = None if stored is None else dict(stored)
    cursor = None if state is None else state.get("cursor")
    step_call = None
    if isinstance(cursor, int) and not edited:
        found = None
        if call[0] is not None:
            # Not loaded into any session: the runner's statements write the call's row (agents/tool_calls.py).
            values = {column.key: value for column, value in zip(_STEP_CALL_COLUMNS, call, strict=True)}
            found = ToolCall(execution_id=execution_id, step_index=cursor, **values)
        step_call = StepCall(cursor, found)
    return Entry(state, test_mode, bool(auto), int(caller_pending), step_call)


def _runnable() -> tuple[sa.ColumnElement[bool], ...]:
    columns = EXECUTIONS.c
    return (
        one_of(columns.status, RUNNABLE),
        # The caller's own agent drives an external execution over REST: no worker ever runs it.
        columns.agent_model != EXTERNAL,
        sa.or_(columns.lease_until.is_(None), columns.lease_until < sa.bindparam("now", type_=UTCDateTime())),
    )


# Built once (every run starts with a claim): by id, and the oldest runnable, which the backend may let skip past
# rows another worker is claiming. PostgreSQL re-checks a claim by id once a concurrent claim's row lock is
# released. Sent straight to the driver (core/_sqlalchemy_shortcuts.py).
_CLAIM_BY_ID = DirectStatement(_claiming(sa.and_(EXECUTIONS.c.id == sa.bindparam("wanted"), *_runnable())))
_OLDEST = sa.select(EXECUTIONS.c.id).where(*_runnable()).order_by(EXECUTIONS.c.created_at).limit(1)


@functools.cache
def _claim_oldest(backend: Backend) -> DirectStatement:
    return DirectStatement(_claiming(EXECUTIONS.c.id == backend.skip_locked(_OLDEST).scalar_subquery()))


async def _claim(db: Database, worker_id: str, lease_seconds: float, execution_id: str | None) -> Claim | None:
    backend = db.backend
    if backend.writes_alone:
        # The claim writes its event too: it is the whole transaction, a statement committing by itself.
        async with db.alone() as alone:
            return await _claimed(alone, backend, db.engine.dialect, worker_id, lease_seconds, execution_id)
    async with db.transaction() as session:
        # Beginning may have waited for another writer: read the clock once it has, or an execution created
        # meanwhile would look started before it was created.
        await backend.begin_writing(session)
        return await _claimed(session, backend, db.engine.dialect, worker_id, lease_seconds, execution_id)


async def _claimed(
    writing: AsyncSession | Alone,
    backend: Backend,
    dialect: Dialect,
    worker_id: str,
    lease_seconds: float,
    execution_id: str | None,
) -> Claim | None:
    now = utcnow()
    parameters = {"now": now, "claimant": worker_id, "claimed_until": now + timedelta(seconds=lease_seconds)}
    if execution_id is not None:
        claiming, parameters["wanted"] = _CLAIM_BY_ID, execution_id
    else:
        claiming = _claim_oldest(backend)
    # Told with the claim itself, not a transaction later: the run has begun the moment it is claimed.
    payload: ExecutionClaimed = {"worker": worker_id}
    statement, parameters["claim_payload"] = backend.claim_statement(claiming), payload
    if isinstance(writing, Alone):
        rows = await run_alone(writing.connection, statement, parameters)
    else:
        # Where the claim writes its event too, it is the whole transaction: no BEGIN and COMMIT round trips.
        await commits_alone(writing)
        rows = await run_direct(writing, lambda cursor: cursor.execute(statement, parameters))
    if not rows:
        return None
    row = rows[0]
    claim = Claim(row[0], row[1], _entry(dialect, row[0], row[3:]))
    started: list[TypedEvent] = [
        (EventType.EXECUTION_STARTED, payload) if claim.epoch == 1 else (EventType.EXECUTION_RESUMED, payload)
    ]
    await add_numbered_events(writing, claim.execution_id, row[2], started, now)
    return claim
