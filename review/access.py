"""Who may decide a checkpoint: the one rule every channel ends in (API, CLI, inbox, chat, mail link, reply).

The assigned reviewer always may. The backup reviewer may once the current attempt has been escalated to
them: the escalation timer of that attempt has fired (review/timers.py), so they have been told. A person whose
account an operator disabled (`vouch users disable`) is neither: whatever they still hold (a review mail's
links, a key a web process cached) decides nothing until they are enabled again.

`may_decide` answers a channel that wants to know before it acts (which buttons to show, 404 or 403);
`review.decide` asks `reviewer_may_decide` again itself, on the execution row it has locked, so no channel
can skip the rule and a reviewer replaced meanwhile is refused whatever the channel checked before.
"""

from __future__ import annotations

from datetime import datetime

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncSession

from core.models import Checkpoint, Execution, ReviewTimer, User


async def disabled(session: AsyncSession, email: str) -> bool:
    """Whether `email` is a user's whom an operator disabled. An address with no account is not disabled:
    reviewers need no account to decide by mail."""
    found = await session.scalar(sa.select(User.id).where(User.email == email, User.disabled_at.is_not(None)))
    return found is not None


async def escalated(session: AsyncSession, checkpoint_id: str, attempt: int) -> bool:
    fired = await session.scalar(
        sa.select(ReviewTimer.fired_at).where(
            ReviewTimer.checkpoint_id == checkpoint_id,
            ReviewTimer.attempt == attempt,
            ReviewTimer.kind == "escalation",
        )
    )
    # Fired at all is enough: the timer's clock may run ahead of ours (tests inject it), and a timer only
    # ever fires without effect once its attempt is decided, when nobody may decide it anyway.
    return fired is not None


async def reviewer_may_decide(
    session: AsyncSession,
    *,
    email: str | None,
    assigned: str | None,
    backup: str | None,
    checkpoint_id: str,
    attempt: int,
) -> bool:
    """The rule itself, on plain values: the assigned reviewer, or the backup once this attempt escalated."""
    if not email:
        return False
    if assigned is not None and email == assigned:
        named = True
    elif backup is None or email != backup:
        return False
    else:
        named = await escalated(session, checkpoint_id, attempt)
    return named and not await disabled(session, email)


async def may_decide(
    session: AsyncSession, execution: Execution, checkpoint: Checkpoint | None, email: str | None, now: datetime
) -> bool:
    """Whether `email` may answer `checkpoint` (None: whichever checkpoint of the execution waits now).

    `now` is the moment asked about; the rule depends on fired timers only, so it is kept for callers'
    symmetry with the timer processing (and for rules to come, e.g. a backup's own deadline)."""
    del now
    if not email:
        return False
    if email == execution.assigned_reviewer:
        return not await disabled(session, email)
    if execution.backup_reviewer is None or email != execution.backup_reviewer:
        return False
    if checkpoint is None:
        checkpoint = await session.scalar(
            sa.select(Checkpoint).where(Checkpoint.execution_id == execution.id, Checkpoint.status == "awaiting_review")
        )
        if checkpoint is None:
            return False
    return await reviewer_may_decide(
        session,
        email=email,
        assigned=execution.assigned_reviewer,
        backup=execution.backup_reviewer,
        checkpoint_id=checkpoint.id,
        attempt=checkpoint.attempt,
    )
