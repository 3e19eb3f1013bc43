"""A change of reviewer while checkpoints wait: the old reviewer's links stop deciding, the new one is told.

Called in the PATCH's own transaction, so there is no moment when both reviewers' mail links decide, and
no moment when a waiting checkpoint has a reviewer who was never told about it.
"""

from __future__ import annotations

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncSession

from core.ids import new_id
from core.models import Checkpoint, Execution
from core.settings import Settings
from review.links import spend_links_of_others
from review.notify import queue_review_mail


async def reviewer_replaced(session: AsyncSession, settings: Settings, execution: Execution) -> int:
    """After `execution.assigned_reviewer` changed (in this transaction): spend every link made for anyone
    else, and mail the reviewer now named for each checkpoint that waits. Returns how many mails were queued."""
    reviewer = execution.assigned_reviewer
    await spend_links_of_others(session, execution.id, reviewer)
    if not reviewer or execution.status != "awaiting_review":
        return 0
    waiting = await session.scalars(
        sa.select(Checkpoint).where(Checkpoint.execution_id == execution.id, Checkpoint.status == "awaiting_review")
    )
    queued = 0
    for checkpoint in waiting:
        # A key of its own: a reviewer named again (A → B → A) gets fresh links, not the spent ones' mail.
        key = f"review:{checkpoint.id}:{checkpoint.attempt}:reassigned:{new_id('ra')}"
        await queue_review_mail(
            session, settings, execution, checkpoint, reviewer, checkpoint.next_action, key=key
        )
        queued += 1
    return queued
