"""Scoring runs once they have ended (issue 23): the worker's side of the verdict.

An execution created with `scorers` has `verdict_state` pending. Once it is final, any worker claims its
scoring with a lease (`verdict_lease_until`, a compare-and-set: one scorer at a time), runs the scorers outside
any transaction (a judge model may take seconds), and records the verdict in one transaction that checks the
state is still pending (core/verdicts.py): recorded once, whatever the number of workers. A worker that dies
while scoring leaves its lease to lapse and another scores the run; a restart finds pending runs by the poll.
A completed run with a `human` scorer opens the reviewer's grade instead (review/grade_request.py), and its
verdict is recorded when the grade comes in.

Wake-ups: the final event of a run with scorers publishes on SCORING_CHANNEL (core/webhooks.py), heard here
at once; a slow poll is the safety net.
"""

from __future__ import annotations

import asyncio
import logging
from datetime import datetime, timedelta
from typing import Any

import sqlalchemy as sa

from agents.providers import ModelRegistry
from core.db import Database
from core.looks import NOW, Looks
from core.models import Execution, utcnow
from core.scorers import DETERMINISTIC, ended_without_output, score_deterministic
from core.settings import Settings
from core.verdicts import record_verdict
from core.vocabulary import FINAL, ExecutionStatus, VerdictState
from core.webhooks import SCORING_CHANNEL
from core.woken_loop import run_woken
from review.grade_request import request_grade

log = logging.getLogger(__name__)


def _due(now: datetime | sa.BindParameter[Any]) -> list[sa.ColumnElement[bool]]:
    return [
        Execution.verdict_state == VerdictState.PENDING,
        Execution.status.in_(list(FINAL)),
        sa.or_(Execution.verdict_lease_until.is_(None), Execution.verdict_lease_until < now),
    ]


async def claim_scoring(db: Database, settings: Settings, execution_id: str, now: datetime) -> sa.Row[Any] | None:
    """Take the scoring of an ended execution for a lease, if it is due and nobody holds it: the facts to score."""
    async with db.transaction() as session:
        claimed = (
            await session.execute(
                sa.update(Execution)
                .where(Execution.id == execution_id, *_due(now))
                .values(verdict_lease_until=now + timedelta(seconds=settings.worker_lease_seconds))
                .returning(
                    Execution.status,
                    Execution.result,
                    Execution.expected,
                    Execution.scorers,
                    Execution.task_description,
                    Execution.agent_model,
                ),
                execution_options={"synchronize_session": False},
            )
        ).first()
    return claimed


async def score_execution(
    db: Database, settings: Settings, models: ModelRegistry, execution_id: str, now: datetime | None = None
) -> bool:
    """Score one ended execution if its scoring is due and nobody holds it; True when this call recorded (or
    opened the grade). `now` is injectable (a lapsed lease in tests)."""
    claimed = await claim_scoring(db, settings, execution_id, now or utcnow())
    if claimed is None:
        return False
    scorers: list[dict[str, Any]] = list(claimed.scorers or ())
    completed = claimed.status == ExecutionStatus.COMPLETED
    output = (claimed.result or {}).get("output") if isinstance(claimed.result, dict) else None
    scores: list[dict[str, Any]] = []
    human: dict[str, Any] | None = None
    for scorer in scorers:
        if not completed:
            scores.append(ended_without_output(scorer, claimed.status))
        elif scorer["type"] in DETERMINISTIC:
            scores.append(score_deterministic(scorer, output, claimed.expected))
        elif scorer["type"] == "llm_judge":
            judge_model = (
                settings.agent_model if claimed.agent_model in ("offline", "external") else claimed.agent_model
            )
            # pydantic_ai loads only once a judge runs (tests/cli/test_imports.py).
            from agents.judge import judge

            scores.append(await judge(models, judge_model, scorer, claimed.task_description, output, claimed.expected))
        else:
            human = scorer
    async with db.transaction() as session:
        if human is not None:
            return await request_grade(session, settings, execution_id, human, scores)
        return await record_verdict(session, execution_id, scores, from_state=VerdictState.PENDING)


async def process_scoring(
    db: Database, settings: Settings, models: ModelRegistry, *, limit: int = 50, now: datetime | None = None
) -> int:
    """Score up to `limit` ended executions whose scoring is due; how many were recorded."""
    async with db.reading() as session:
        due = list(await session.scalars(sa.select(Execution.id).where(*_due(now or utcnow())).limit(limit)))
    done = 0
    for execution_id in due:
        try:
            done += await score_execution(db, settings, models, execution_id, now)
        except Exception:
            log.exception("scoring %s failed; retrying when its lease lapses", execution_id)
    return done


async def run_scoring(
    db: Database, settings: Settings, models: ModelRegistry, looks: Looks, stop: asyncio.Event
) -> None:
    """The worker's scoring loop: woken by a run's end, the beat's look as the safety net."""
    await run_woken(
        db,
        SCORING_CHANNEL,
        lambda: process_scoring(db, settings, models),
        stop,
        looks=looks,
        look="scoring",
        due=sa.select(Execution.id).where(*_due(NOW)),
        name="the worker's scoring wake-ups",
        failure="scoring failed; retrying at the next wake-up",
    )
