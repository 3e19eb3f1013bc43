"""External agents that went away: an execution its own agent drives (agentModel "external") that has had no
event for VOUCH_EXTERNAL_IDLE_SECONDS while not waiting for a review fails `agent_lost`.

Idle is measured from the execution's latest event: every call of the agent that changes anything adds one,
and a decision adds one too, so the agent's time to act on a decision starts when it was made.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from datetime import timedelta

import sqlalchemy as sa

from core.beats import seconds_to_beat
from core.db import Database
from core.errors import FailureCode, failure
from core.events import append_event
from core.model_profiles import EXTERNAL
from core.models import Event, Execution, utcnow
from core.settings import Settings
from core.vocabulary import EventType

log = logging.getLogger(__name__)

# Waiting for a review is not the agent's silence: only these count.
_SILENT_STATUSES = ("queued", "running")


async def fail_lost_agents(db: Database, settings: Settings) -> list[str]:
    """Fail every external execution silent for too long; the ids failed."""
    idle = settings.external_idle_seconds
    cutoff = utcnow() - timedelta(seconds=idle)
    latest = sa.select(sa.func.max(Event.created_at)).where(Event.execution_id == Execution.id).scalar_subquery()
    async with db.reading() as session:
        silent = list(
            await session.scalars(
                sa.select(Execution.id).where(
                    Execution.agent_model == EXTERNAL, Execution.status.in_(_SILENT_STATUSES), latest < cutoff
                )
            )
        )
    failed = []
    for execution_id in silent:
        error = failure(FailureCode.AGENT_LOST, f"the external agent sent nothing for {idle:g} seconds")
        async with db.transaction() as session:
            # Conditional: an event or a cancel that came meanwhile wins.
            moved = await session.execute(
                sa.update(Execution)
                .where(Execution.id == execution_id, Execution.status.in_(_SILENT_STATUSES), latest < cutoff)
                .values(status="failed", completed_at=utcnow(), error=error["detail"], error_info=error),
                execution_options={"synchronize_session": False},
            )
            if moved.rowcount == 1:  # type: ignore[attr-defined]
                await append_event(
                    session, execution_id, EventType.EXECUTION_FAILED, {"status": "failed", "error": error}
                )
                failed.append(execution_id)
    for execution_id in failed:
        log.info("execution %s failed: %s", execution_id, FailureCode.AGENT_LOST)
    return failed


async def run_external_sweep(db: Database, settings: Settings, stop: asyncio.Event) -> None:
    """The worker's loop over silent external agents: a few looks per idle period, at most one a minute apart."""
    every = min(settings.external_idle_seconds / 4, 60.0)
    while not stop.is_set():
        try:
            await fail_lost_agents(db, settings)
        except Exception:
            log.exception("the external agents' sweep failed; retrying at its next look")
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), seconds_to_beat(every))
