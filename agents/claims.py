"""Claiming runnable executions with leases.

Runnable: `queued`, or `running` with no live lease (just approved, or its worker died).
PostgreSQL skips rows another worker is claiming; SQLite serialises writers with
BEGIN IMMEDIATE, so a single UPDATE … RETURNING is atomic there.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

import sqlalchemy as sa

from core.db import Database
from core.models import Execution, UTCDateTime, utcnow

RUNNABLE = ("queued", "running")


class LeaseLost(Exception):
    """Another worker holds this execution now, or it left the running state."""


@dataclass(frozen=True)
class Claim:
    execution_id: str
    epoch: int


async def claim_next(db: Database, worker_id: str, lease_seconds: float) -> Claim | None:
    async with db.transaction() as session:
        if db.dialect == "sqlite":
            # BEGIN IMMEDIATE may have waited for another writer: read the clock once the lock is
            # ours, or an execution created meanwhile would look started before it was created.
            await session.execute(sa.text("SELECT 1"))
        now = utcnow()
        candidate = (
            sa.select(Execution.id)
            .where(
                Execution.status.in_(RUNNABLE),
                sa.or_(Execution.lease_until.is_(None), Execution.lease_until < now),
            )
            .order_by(Execution.created_at)
            .limit(1)
        )
        if db.dialect == "postgresql":
            candidate = candidate.with_for_update(skip_locked=True)
        row = (
            await session.execute(
                sa.update(Execution)
                .where(Execution.id == candidate.scalar_subquery())
                .values(
                    status="running",
                    worker_id=worker_id,
                    lease_until=now + timedelta(seconds=lease_seconds),
                    lease_epoch=Execution.lease_epoch + 1,
                    started_at=sa.func.coalesce(Execution.started_at, sa.literal(now, UTCDateTime())),
                )
                .returning(Execution.id, Execution.lease_epoch),
                execution_options={"synchronize_session": False},
            )
        ).first()
    return Claim(row[0], row[1]) if row is not None else None
