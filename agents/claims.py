"""Claiming runnable executions with leases.

Runnable: `queued`, or `running` with no live lease (just approved, or its worker died).
PostgreSQL skips rows another worker is claiming; SQLite serialises writers with
BEGIN IMMEDIATE, so a single UPDATE … RETURNING is atomic there.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from datetime import timedelta

import sqlalchemy as sa

from core.db import Database, commits_alone, one_of
from core.direct import DirectStatement, run_direct
from core.events import add_numbered_events, announce_events
from core.models import EVENTS, EXECUTIONS, UTCDateTime, utcnow

RUNNABLE = ("queued", "running")


class LeaseLost(Exception):
    """Another worker holds this execution now, or it left the running state."""


@dataclass(frozen=True)
class Claim:
    execution_id: str
    epoch: int


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
        .returning(columns.id, columns.lease_epoch, columns.last_seq)
    )


def _runnable() -> tuple[sa.ColumnElement[bool], ...]:
    columns = EXECUTIONS.c
    return (
        one_of(columns.status, RUNNABLE),
        sa.or_(columns.lease_until.is_(None), columns.lease_until < sa.bindparam("now", type_=UTCDateTime())),
    )


# Built once (every run starts with a claim): by id, and the oldest runnable, which PostgreSQL skips past rows
# another worker is claiming for. PostgreSQL re-checks a claim by id once a concurrent claim's row lock is released.
# Sent straight to the driver (core/direct.py).
_CLAIM_BY_ID = DirectStatement(_claiming(sa.and_(EXECUTIONS.c.id == sa.bindparam("wanted"), *_runnable())))
_OLDEST = sa.select(EXECUTIONS.c.id).where(*_runnable()).order_by(EXECUTIONS.c.created_at).limit(1)
_CLAIM_OLDEST = {
    "sqlite": DirectStatement(_claiming(EXECUTIONS.c.id == _OLDEST.scalar_subquery())),
    "postgresql": DirectStatement(
        _claiming(EXECUTIONS.c.id == _OLDEST.with_for_update(skip_locked=True).scalar_subquery())
    ),
}


@functools.cache
def _claiming_with_event(claiming: DirectStatement) -> DirectStatement:
    """PostgreSQL: `claiming` and the claim's event (`execution.started` at the first epoch, else
    `execution.resumed`; payload `claim_payload`) in one statement, a data-modifying CTE. Returns as `claiming`."""
    claimed = claiming.statement.cte("claimed")
    started = sa.case((claimed.c.lease_epoch == 1, "execution.started"), else_="execution.resumed")
    event = sa.select(
        claimed.c.id,
        claimed.c.last_seq,
        started,
        sa.bindparam("claim_payload", type_=EVENTS.c.payload.type),
        sa.bindparam("now", type_=UTCDateTime()),
    )
    columns = ["execution_id", "seq", "type", "payload", "created_at"]
    logged = sa.insert(EVENTS).from_select(columns, event).cte("logged")
    return DirectStatement(sa.select(claimed.c.id, claimed.c.lease_epoch, claimed.c.last_seq).add_cte(logged))


async def _claim(db: Database, worker_id: str, lease_seconds: float, execution_id: str | None) -> Claim | None:
    async with db.transaction() as session:
        if db.dialect == "sqlite":
            # BEGIN IMMEDIATE may have waited for another writer: read the clock once the lock is
            # ours, or an execution created meanwhile would look started before it was created.
            await session.connection()  # begins: BEGIN IMMEDIATE, after the in-process writers' queue
        now = utcnow()
        parameters = {"now": now, "claimant": worker_id, "claimed_until": now + timedelta(seconds=lease_seconds)}
        if execution_id is not None:
            claiming, parameters["wanted"] = _CLAIM_BY_ID, execution_id
        else:
            claiming = _CLAIM_OLDEST[db.dialect]
        # Told with the claim itself, not a transaction later: the run has begun the moment it is claimed.
        payload = {"worker": worker_id}
        statement = claiming
        if db.dialect == "postgresql":
            statement, parameters["claim_payload"] = _claiming_with_event(claiming), payload
            # The claim and its event are one statement, the whole transaction: no BEGIN and COMMIT round trips.
            await commits_alone(session)
        rows = await run_direct(session, lambda cursor: cursor.execute(statement, parameters))
        if not rows:
            return None
        row = rows[0]
        claim = Claim(row[0], row[1])
        started = [("execution.started" if claim.epoch == 1 else "execution.resumed", payload)]
        if db.dialect == "postgresql":
            await announce_events(session, claim.execution_id, row[2], started, now)
        else:
            await add_numbered_events(session, claim.execution_id, row[2], started)
    return claim
