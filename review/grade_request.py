"""Asking for the `human` scorer's grade once a run has completed (issue 23).

The grade is a checkpoint of origin `grade` after the run's own: the same row, event, timers and review mail
a pause writes, so every channel (mail links and replies, inbox, chat card, API, CLI) shows and answers it as
it does a checkpoint, with its own deadline (the scorer's `deadline`, else the task's reviewDeadline). The
execution stays as it ended; only its verdict waits (`verdict_state` grading), and with it the completion
webhook.
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncSession

from core.event_payloads import CheckpointAwaitingReview
from core.events import append_event
from core.ids import new_id
from core.models import Checkpoint, Execution, utcnow
from core.settings import Settings
from core.vocabulary import CheckpointOrigin, EventType, VerdictState
from review.grading import GRADE_QUESTION, GRADE_STAGE
from review.notify import checkpoint_awaiting
from review.timers import schedule_timers


async def request_grade(
    session: AsyncSession,
    settings: Settings,
    execution_id: str,
    human: dict[str, Any],
    scores: list[dict[str, Any]],
) -> bool:
    """Keep the other scorers' `scores` and open the grade; False when another worker did it first."""
    now = utcnow()
    moved = await session.execute(
        sa.update(Execution)
        .where(Execution.id == execution_id, Execution.verdict_state == VerdictState.PENDING)
        .values(verdict_state=VerdictState.GRADING, verdict_scores=scores, verdict_lease_until=None),
        execution_options={"synchronize_session": False},
    )
    if moved.rowcount != 1:  # type: ignore[attr-defined]
        return False
    execution = await session.get_one(Execution, execution_id, populate_existing=True)
    last = await session.scalar(
        sa.select(sa.func.max(Checkpoint.position)).where(Checkpoint.execution_id == execution_id)
    )
    result = execution.result or {}
    action = {
        "tool": "grade",
        "instruction": "grade the result",
        "args": {"output": result.get("output")}
        | ({"expected": execution.expected} if execution.expected is not None else {}),
        "editable": False,
    }
    checkpoint = Checkpoint(
        id=new_id("chk"),
        execution_id=execution_id,
        position=(last if last is not None else -1) + 1,
        stage=GRADE_STAGE,
        description="The run has completed. Read its result and grade it.",
        verification_question=GRADE_QUESTION,
        origin=CheckpointOrigin.GRADE,
        status="awaiting_review",
        awaiting_since=now,
        attempt=1,
        next_action=action,
    )
    session.add(checkpoint)
    await session.flush()
    awaiting: CheckpointAwaitingReview = {
        "checkpointId": checkpoint.id,
        "position": checkpoint.position,
        "stage": checkpoint.stage,
        "description": checkpoint.description,
        "verificationQuestion": checkpoint.verification_question,
        "origin": checkpoint.origin,
        "attempt": 1,
        "toolCallId": None,
        "nextAction": action,
        "readsComments": True,
    }
    await append_event(session, execution_id, EventType.CHECKPOINT_AWAITING_REVIEW, awaiting)
    deadline = human.get("deadline") or execution.review_deadline_seconds
    await schedule_timers(session, settings, execution_id, checkpoint, now, deadline_seconds=deadline)
    await checkpoint_awaiting(session, settings, execution_id, checkpoint, action)
    return True
