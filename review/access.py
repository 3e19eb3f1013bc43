"""Who may decide a checkpoint: the one rule every channel ends in (API, CLI, inbox, chat, mail link, reply).

The assigned reviewer always may. The backup reviewer may once the current attempt has been escalated to
them: the escalation timer of that attempt has fired (review/timers.py), so they have been told. A person whose
account an operator disabled (`vouch users disable`) is neither: whatever they still hold (a review mail's
links, a key a web process cached) decides nothing until they are enabled again.

`may_decide` answers a channel that wants to know before it acts (which buttons to show, 404 or 403);
`review.decide` checks the rule again itself (`decider_rule`) in the statement that moves the execution on, on
its row as it then stands, so no channel can skip the rule and a reviewer replaced meanwhile is refused whatever
the channel checked before. The rule is written once, as SQL; `reviewer_may_decide` asks it of plain values.
"""

from __future__ import annotations

from datetime import datetime
from typing import cast

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncSession

from core.models import Checkpoint, Execution, ReviewTimer, User

_TIMERS = cast(sa.Table, ReviewTimer.__table__).c
_USERS = cast(sa.Table, User.__table__).c
# What makes an account disabled (`vouch users disable`), for every question below that asks it.
_IS_DISABLED = _USERS.disabled_at.is_not(None)


def _disabled(email: sa.ColumnElement[str]) -> sa.Exists:
    return sa.exists().where(_USERS.email == email, _IS_DISABLED)


def decider_rule(
    email: sa.ColumnElement[str],
    assigned: sa.ColumnElement[str | None],
    backup: sa.ColumnElement[str | None],
    checkpoint_id: sa.ColumnElement[str],
    attempt: sa.ColumnElement[int],
) -> sa.ColumnElement[bool]:
    """The rule as one SQL condition, over columns or bound values: `email` may decide `attempt` of the checkpoint
    whose execution names `assigned` and `backup`. A statement that locks or writes the execution's row can carry
    it (review.decide's move), so the rule is checked on the row as it stands when the decision commits."""
    # The escalation timer of this attempt fired at all is enough: the timer's clock may run ahead of ours (tests
    # inject it), and a timer only ever fires without effect once its attempt is decided, when nobody may decide.
    escalated = sa.exists().where(
        _TIMERS.checkpoint_id == checkpoint_id,
        _TIMERS.attempt == attempt,
        _TIMERS.kind == "escalation",
        _TIMERS.fired_at.is_not(None),
    )
    named = sa.or_(assigned == email, sa.and_(backup == email, escalated))
    return sa.and_(named, ~_disabled(email))


class ReviewerDisabled(Exception):
    """A run names as its reviewer (`field`: assignedReviewer or backupReviewer) the address of an account an
    operator disabled: they could decide nothing, and the run would wait for nobody."""

    def __init__(self, field: str, email: str) -> None:
        super().__init__(f"{field}: {email} is disabled")
        self.field = field
        self.email = email


def none_disabled(*emails: sa.ColumnElement[str | None]) -> sa.ColumnElement[bool]:
    """As SQL, the condition a new run's row is written under: none of `emails` (NULL: nobody named) is the address
    of a disabled account."""
    return ~sa.exists().where(_USERS.email.in_(emails), _IS_DISABLED)


async def refuse_disabled_reviewers(session: AsyncSession, **named: str | None) -> None:
    """Raise ReviewerDisabled for the first of the reviewers named (by field) whose account is disabled."""
    found = await disabled_among(session, {email for email in named.values() if email})
    for field, email in named.items():
        if email in found:
            raise ReviewerDisabled(field, email)


async def disabled_among(session: AsyncSession, emails: set[str]) -> set[str]:
    """Those of `emails` that are the addresses of disabled accounts."""
    if not emails:
        return set()
    query = sa.select(_USERS.email).where(_USERS.email.in_(sorted(emails)), _IS_DISABLED)
    return set(await session.scalars(query))


async def disabled(session: AsyncSession, email: str) -> bool:
    """Whether `email` is a user's whom an operator disabled. An address with no account is not disabled:
    reviewers need no account to decide by mail."""
    return bool(await session.scalar(sa.select(_disabled(sa.literal(email, sa.String())))))


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
    if not email or email not in (assigned, backup):
        return False  # named by neither: no statement needed to say no
    rule = decider_rule(
        sa.literal(email, sa.String()),
        sa.literal(assigned, sa.String()),
        sa.literal(backup, sa.String()),
        sa.literal(checkpoint_id, sa.String()),
        sa.literal(attempt, sa.Integer()),
    )
    return bool(await session.scalar(sa.select(rule)))


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
