"""A reviewer disabled while checkpoints wait for them: the owner is told, and a backup takes over at once.

review/access.py already refuses a disabled person on every channel; what is left is the checkpoint that
waits for them. Its owner gets a mail naming the reviewer and what to do (name another with PATCH
assignedReviewer, which mails them working links: review/reassign.py), and an escalation to a backup reviewer
is brought forward to now, so the worker's timer loop hands the checkpoint to the backup at its next poll
instead of after the usual delay. Called in the disable's own transaction (`vouch users disable`).
"""

from __future__ import annotations

from dataclasses import dataclass

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncSession

from core.ids import new_id
from core.mail import enqueue_mail
from core.models import Checkpoint, Execution, ReviewTimer, User, utcnow
from core.settings import Settings


@dataclass(frozen=True)
class Stranded:
    """An execution with a checkpoint that waited for the disabled reviewer."""

    execution_id: str
    owner: str
    # The backup reviewer whose escalation was brought forward; None: only the owner can hand it on.
    backup: str | None


async def reviewer_disabled(session: AsyncSession, settings: Settings, email: str) -> list[Stranded]:
    """Tell the owner of every execution whose waiting checkpoint `email` was to decide (as its assigned
    reviewer, or its backup after escalation), and bring forward the escalation of those it was assigned."""
    now = utcnow()
    waiting = await session.execute(
        sa.select(Execution, User.email, Checkpoint)
        .join(User, User.id == Execution.user_id)
        .join(Checkpoint, Checkpoint.execution_id == Execution.id)
        .where(
            Checkpoint.status == "awaiting_review",
            sa.or_(Execution.assigned_reviewer == email, Execution.backup_reviewer == email),
        )
        .order_by(Execution.created_at, Checkpoint.id)
    )
    told: dict[str, Stranded] = {}
    for execution, owner, checkpoint in waiting.tuples():
        backup = execution.backup_reviewer if execution.assigned_reviewer == email else None
        if backup is not None and backup != email:
            await session.execute(
                sa.update(ReviewTimer)
                .where(
                    ReviewTimer.checkpoint_id == checkpoint.id,
                    ReviewTimer.attempt == checkpoint.attempt,
                    ReviewTimer.kind == "escalation",
                    ReviewTimer.fired_at.is_(None),
                    ReviewTimer.due_at > now,
                )
                .values(due_at=now),
                execution_options={"synchronize_session": False},
            )
        else:
            backup = None
        if execution.id in told:
            continue
        told[execution.id] = Stranded(execution.id, owner, backup)
        role = "assigned reviewer" if execution.assigned_reviewer == email else "backup reviewer"
        if role == "backup reviewer":
            then = f"Its assigned reviewer, {execution.assigned_reviewer}, still may; it escalates to nobody."
        elif backup:
            then = f"Its backup reviewer, {backup}, is asked now instead."
        else:
            then = "Nobody else may decide it until you name another reviewer."
        lines = [
            f"The {role} of {execution.task_name!r}, {email}, has been disabled by an operator of this Vouch:",
            f"they can no longer decide its checkpoint {checkpoint.stage!r}, which waits for a decision. {then}",
            "",
            "To name another reviewer, who is mailed the checkpoint at once:",
            f"PATCH /api/eval/executions/{execution.id} with {{\"assignedReviewer\": \"<their e-mail>\"}}",
        ]
        await enqueue_mail(
            session,
            message_key=f"reviewer-disabled:{execution.id}:{new_id('rd')}",
            sender=settings.mail_from,
            recipient=owner,
            subject=f"[Vouch] Reviewer disabled: {execution.task_name!r} needs another reviewer",
            text_body="\n".join(lines) + "\n",
            execution_id=execution.id,
            smtp_configured=settings.smtp_url is not None,
        )
    return list(told.values())
