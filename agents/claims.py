"""Claiming runnable executions with leases.

Runnable: `queued`, or `running` with no live lease (just approved, or its worker died). A run just approved is kept
for the worker its wake-up reaches for a moment (core/run_entry.py WAKE_UP_WINDOW): only a claim naming it takes it
then; a search passes it by.
How two workers never claim the same row is the backend's (core/backends: PostgreSQL skips rows another
worker is claiming; SQLite serialises writers with BEGIN IMMEDIATE, so a single UPDATE … RETURNING is atomic).
"""

from __future__ import annotations

import functools
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
from core.events import add_numbered_events, seq_allocation
from core.model_profiles import EXTERNAL, OFFLINE
from core.models import EXECUTIONS, UTCDateTime, utcnow
from core.run_entry import ENTRY_RETURNING, Entry, Resume, entry_of
from core.sql import equals_by_row
from core.vocabulary import EventType

RUNNABLE = ("queued", "running")


class LeaseLost(Exception):
    """Another worker holds this execution now, or it left the running state."""


class NotTakenOver(LeaseLost):
    """A claim to be taken over by the run's first step (`Claim.resume`) cannot be: the step takes more than one
    statement, or the hint holds no state to go on from. Nothing was written; the run is claimed as usual (as where
    the step's statement matched nothing: the row moved on since the decision, LeaseLost)."""


@dataclass(frozen=True)
class Claim:
    execution_id: str
    epoch: int
    # Not part of what a claim is (two claims of one epoch are the same claim): what the runner starts from.
    entry: Entry | None = field(default=None, compare=False)
    # Set on a claim not made yet: the run's first step makes it, in its own statement (`taking_over`), while the
    # row still has the epoch and seq the decision that let the run go on left it with.
    resume: Resume | None = field(default=None, compare=False)

    def taken(self) -> Claim:
        """This claim once its first step took it over."""
        return Claim(self.execution_id, self.epoch, self.entry)


def claim_to_take_over(execution_id: str, resume: Resume) -> Claim | None:
    """The claim a wake-up's hint lets the run's first step take over (`taking_over`): only the offline agent's run
    (whose step the driver can tell from its state alone), at a step the claim found the call of."""
    state = resume.entry.state
    if state is None or state.get("agent") != OFFLINE or resume.entry.step_call is None:
        return None
    return Claim(execution_id, resume.epoch + 1, resume.entry, resume)


# A claim is still the execution's: the conditions every write of a run is fenced by, with bind parameters
# `claim_worker` and `claim_epoch` (ExecutionRunner.fenced), so that statements carrying them are built once. Each
# statement names its execution by id too, which is how it finds the row (tests/agents/test_statement_plans.py).
CLAIM_HOLDS = (
    EXECUTIONS.c.worker_id == sa.bindparam("claim_worker"),
    EXECUTIONS.c.lease_epoch == sa.bindparam("claim_epoch"),
    equals_by_row(EXECUTIONS.c.status, "running"),
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
        # After (id, lease_epoch, last_seq), what the runner needs to go on: its re-entry needs no statement of its
        # own, and a run whose caller checkpoints are all passed (the usual resume) no read of them either.
        .returning(columns.id, columns.lease_epoch, columns.last_seq, *ENTRY_RETURNING)
    )


# Fenced allocation -> the same allocation taking the claim over (`fenced_allocation`).
_TAKING_OVER: dict[DirectStatement, DirectStatement] = {}


def fenced_allocation(*where: sa.ColumnElement[bool], **values: Any) -> DirectStatement:
    """`seq_allocation` fenced by the claim (CLAIM_HOLDS, its parameters `ExecutionRunner.fenced`'s), with, for a
    claim's first step to take the claim over (`taking_over`), the same statement claiming the row instead: where it
    is runnable and still has the lease epoch and last seq the decision left it with (parameters `seen_epoch`,
    `seen_seq`, `now`), it becomes the claim's (`claim_epoch`, `claim_worker`, lease until `renewed_until`)."""
    columns = EXECUTIONS.c
    fenced = seq_allocation(*CLAIM_HOLDS, *where, **values)
    taken = {
        "status": "running",
        "worker_id": sa.bindparam("claim_worker"),
        "lease_epoch": sa.bindparam("claim_epoch", type_=sa.Integer()),
        "lease_until": sa.bindparam("renewed_until"),
    }
    _TAKING_OVER[fenced] = seq_allocation(
        *runnable(named=True),
        columns.lease_epoch == sa.bindparam("seen_epoch", type_=sa.Integer()),
        columns.last_seq == sa.bindparam("seen_seq", type_=sa.Integer()),
        *where,
        **{**taken, **values},
    )
    return fenced


def taking_over(allocation: DirectStatement, claim: Claim) -> tuple[DirectStatement, dict[str, Any]]:
    """For the first step of a claim to take over (`Claim.resume`), `allocation` (made by `fenced_allocation`) as
    the statement that claims the row too, and the parameters it takes beside the fenced one's."""
    resume = claim.resume
    if resume is None:
        raise ValueError("the claim is already held")
    return _TAKING_OVER[allocation], {"seen_epoch": resume.epoch, "seen_seq": resume.seq, "now": utcnow()}


def runnable(*, named: bool) -> tuple[sa.ColumnElement[bool], ...]:
    """Runnable at bind parameter `now`, for a claim that searches or, `named`, for one that names the execution (a
    wake-up's): that one also takes a run kept for its wake-up, whose lease no worker holds (core/run_entry.py
    WAKE_UP_WINDOW)."""
    columns = EXECUTIONS.c
    now = sa.bindparam("now", type_=UTCDateTime())
    free = [columns.lease_until.is_(None), columns.lease_until < now]
    if named:
        free.append(columns.worker_id.is_(None))
        # Named by a wake-up, sent once its creation was committed: created before `now`.
        created: tuple[sa.ColumnElement[bool], ...] = ()
    else:
        # A search's statement may run well after it read the clock (a loaded machine, a new connection): one
        # created meanwhile is its wake-up's, or it would look started before it was created.
        created = (columns.created_at <= now,)
    return (
        one_of(columns.status, RUNNABLE),
        # The caller's own agent drives an external execution over REST: no worker ever runs it.
        columns.agent_model != EXTERNAL,
        sa.or_(*free),
        *created,
    )


# Built once (every run starts with a claim): by id, and the oldest runnable, which the backend may let skip past
# rows another worker is claiming. PostgreSQL re-checks a claim by id once a concurrent claim's row lock is
# released. Sent straight to the driver (core/_sqlalchemy_shortcuts.py).
_CLAIM_BY_ID = DirectStatement(
    _claiming(sa.and_(EXECUTIONS.c.id == sa.bindparam("wanted"), *runnable(named=True)))
)
# The executions a search may claim at bind parameter `now`: the worker's beat looks for these (agents/worker.py).
SEARCHABLE = sa.select(EXECUTIONS.c.id).where(*runnable(named=False))
_OLDEST = SEARCHABLE.order_by(EXECUTIONS.c.created_at).limit(1)


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
    claim = Claim(row[0], row[1], entry_of(dialect, row[0], row[3:]))
    started: list[TypedEvent] = [
        (EventType.EXECUTION_STARTED, payload) if claim.epoch == 1 else (EventType.EXECUTION_RESUMED, payload)
    ]
    await add_numbered_events(writing, claim.execution_id, row[2], started, now)
    return claim
