"""A checkpoint starts waiting for its reviewer: the one pause every agent takes, built-in or external.

The pause is rows, not a waiting coroutine: the checkpoint's status and proposed action, the execution let go
of (`awaiting_review`, no worker), the `checkpoint.awaiting_review` event the chat shows as a card, the
reminder/escalation/deadline timers and the review mail, all in the caller's transaction, so that a pause
never exists without its timers or its mail.
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncSession

from core.event_payloads import CheckpointAwaitingReview
from core.events import append_event
from core.models import Checkpoint, Execution, utcnow
from core.settings import Settings
from core.vocabulary import EventType
from review.notify import checkpoint_awaiting
from review.timers import schedule_timers


async def pause_for_review(
    session: AsyncSession,
    settings: Settings,
    execution_id: str,
    checkpoint: Checkpoint,
    next_action: dict[str, Any],
    guards: dict[str, Any] | None = None,
) -> None:
    """Make `checkpoint` wait for its reviewer with `next_action` (its `editable` already decided) on record."""
    now = utcnow()
    checkpoint.status, checkpoint.awaiting_since = "awaiting_review", now
    checkpoint.next_action = next_action
    reads_comments = await session.scalar(sa.select(Execution.reads_comments).where(Execution.id == execution_id))
    await session.execute(
        sa.update(Execution)
        .where(Execution.id == execution_id)
        .values(status="awaiting_review", worker_id=None, lease_until=None)
    )
    awaiting: CheckpointAwaitingReview = {
        "checkpointId": checkpoint.id,
        "position": checkpoint.position,
        "stage": checkpoint.stage,
        "description": checkpoint.description,
        "verificationQuestion": checkpoint.verification_question,
        "origin": checkpoint.origin,
        "attempt": checkpoint.attempt,
        "toolCallId": checkpoint.tool_call_id,
        "nextAction": next_action,
        # False: the agent cannot revise from a comment, so a rejection ends the run (the card says so).
        "readsComments": reads_comments,
    }
    if guards is not None:
        awaiting["guards"] = guards
    await append_event(session, execution_id, EventType.CHECKPOINT_AWAITING_REVIEW, awaiting)
    await schedule_timers(session, settings, execution_id, checkpoint, now)
    await checkpoint_awaiting(session, settings, execution_id, checkpoint, next_action)
