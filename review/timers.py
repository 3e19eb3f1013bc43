"""Reminders, escalation and deadlines as durable timers: rows in review_timers.

A pause writes its timers in its own transaction (`schedule_timers`, called from the runner). The worker
fires due ones (`process_due_timers`): each timer is claimed, acted on and marked fired in ONE transaction
(PostgreSQL: FOR UPDATE SKIP LOCKED, so workers share the work; SQLite: the write session's BEGIN IMMEDIATE).
A processor that dies between claim and effect rolls back with it, and the next one fires the timer: once.
A timer whose attempt has been decided (or whose execution moved on) is marked fired with no effect.

Timings: the reminder VOUCH_REVIEW_REMINDER_MINUTES after the pause (assigned reviewer), the escalation
VOUCH_REVIEW_ESCALATION_MINUTES after it (backup reviewer, who may then decide too: review/access.py), and
the deadline the task's reviewDeadline seconds after it, applying onDeadline as a decision `via: timeout`.
"""

from __future__ import annotations

import asyncio
import logging
from datetime import datetime, timedelta
from typing import Any, Literal

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncSession

from core.backends import backend_of
from core.db import Database
from core.event_payloads import ReviewDeadlinePassed, ReviewTimerFired
from core.events import append_event
from core.ids import new_id
from core.links import chat_url
from core.looks import NOW, Looks
from core.mail import enqueue_mail
from core.models import Checkpoint, Execution, ReviewTimer, utcnow
from core.settings import Settings
from core.vocabulary import Channel, CheckpointOrigin, EventType
from core.woken_loop import run_woken
from review.access import disabled
from review.decisions import Outcome, decide

log = logging.getLogger(__name__)

KINDS = ("reminder", "escalation", "deadline")


async def schedule_timers(
    session: AsyncSession,
    settings: Settings,
    execution_id: str,
    checkpoint: Checkpoint,
    now: datetime,
    *,
    deadline_seconds: int | None = None,
) -> None:
    """Write the timers of this attempt of `checkpoint` (in the caller's transaction: the pause's). The deadline
    is the task's reviewDeadline, or `deadline_seconds` when given (a grade's own: review/grade_request.py)."""
    execution = await session.get_one(Execution, execution_id)
    deadline = deadline_seconds if deadline_seconds is not None else execution.review_deadline_seconds
    due: list[tuple[str, datetime]] = []
    if execution.assigned_reviewer:
        due.append(("reminder", now + timedelta(minutes=settings.review_reminder_minutes)))
    if execution.backup_reviewer:
        due.append(("escalation", now + timedelta(minutes=settings.review_escalation_minutes)))
    if deadline is not None:
        due.append(("deadline", now + timedelta(seconds=deadline)))
    for kind, at in due:
        session.add(
            ReviewTimer(
                id=new_id("tmr"),
                execution_id=execution_id,
                checkpoint_id=checkpoint.id,
                attempt=checkpoint.attempt,
                kind=kind,
                due_at=at,
            )
        )


def _due(now: datetime | sa.BindParameter[Any]) -> list[sa.ColumnElement[bool]]:
    return [ReviewTimer.fired_at.is_(None), ReviewTimer.due_at <= now]


async def _claim(session: AsyncSession, now: datetime) -> ReviewTimer | None:
    query = sa.select(ReviewTimer).where(*_due(now)).order_by(ReviewTimer.due_at, ReviewTimer.id).limit(1)
    return await session.scalar(backend_of(session).skip_locked(query))


def _mail_text(settings: Settings, execution: Execution, checkpoint: Checkpoint, opening: str) -> str:
    base = settings.public_base_url() or ""
    lines = [
        opening,
        "",
        f"Task: {execution.task_name}",
        f"Stage: {checkpoint.stage} (attempt {checkpoint.attempt})",
        f"Question: {checkpoint.verification_question}",
        "",
        f"Review it in your inbox: {base}/review/inbox/{checkpoint.id}",
        f"Live chat: {chat_url(base, settings.secret_key, execution.id)}",
    ]
    return "\n".join(lines) + "\n"


async def fire(session: AsyncSession, settings: Settings, timer: ReviewTimer, now: datetime) -> bool:
    """Act on one claimed timer and mark it fired, in the caller's transaction. False: it had nothing to do."""
    timer.fired_at = now
    checkpoint = await session.get_one(Checkpoint, timer.checkpoint_id)
    execution = await session.get_one(Execution, timer.execution_id)
    # A grade (issue 23) waits after its run has ended: its execution does not wait, its verdict does.
    grade = checkpoint.origin == CheckpointOrigin.GRADE
    live = (
        checkpoint.status == "awaiting_review"
        and checkpoint.attempt == timer.attempt
        and (execution.status == "awaiting_review" or grade)
    )
    if not live:
        return False
    if timer.kind in ("reminder", "escalation"):
        to = execution.assigned_reviewer if timer.kind == "reminder" else execution.backup_reviewer
        if not to or await disabled(session, to):
            return False  # a disabled reviewer may not decide (review/access.py): nothing to remind them of
        if timer.kind == "reminder":
            opening = "A reminder: this checkpoint still waits for your review."
        elif execution.assigned_reviewer and await disabled(session, execution.assigned_reviewer):
            # Brought forward when the assigned reviewer was disabled (review/disabled_reviewer.py).
            opening = f"{execution.assigned_reviewer} can no longer decide this checkpoint; you may decide it now."
        else:
            opening = f"This checkpoint has waited for {execution.assigned_reviewer} too long; you may decide it now."
        await enqueue_mail(
            session,
            message_key=f"review-timer:{timer.id}",
            sender=settings.mail_from,
            recipient=to,
            subject=f"[Vouch] {'Reminder' if timer.kind == 'reminder' else 'Escalated'}: "
            f"review {checkpoint.stage!r} of {execution.task_name!r}",
            text_body=_mail_text(settings, execution, checkpoint, opening),
            execution_id=execution.id,
            smtp_configured=settings.smtp_url is not None,
        )
        event: Literal[EventType.REVIEW_REMINDER_SENT, EventType.REVIEW_ESCALATED] = (
            EventType.REVIEW_REMINDER_SENT if timer.kind == "reminder" else EventType.REVIEW_ESCALATED
        )
        sent: ReviewTimerFired = {
            "checkpointId": checkpoint.id,
            "attempt": timer.attempt,
            "stage": checkpoint.stage,
            "to": to,
        }
        await append_event(session, execution.id, event, sent)
        return True
    passed: ReviewDeadlinePassed = {
        "checkpointId": checkpoint.id,
        "attempt": timer.attempt,
        "stage": checkpoint.stage,
        "policy": "no_grade" if grade else execution.on_deadline,
    }
    await append_event(session, execution.id, EventType.REVIEW_DEADLINE_PASSED, passed)
    policy: Outcome = "reject"
    if grade:
        policy = "cancel"  # no grade: the human scorer could not say (never a pass, never a made-up fail)
    elif execution.on_deadline == "approve":
        policy = "approve"
    elif execution.on_deadline == "cancel":
        policy = "cancel"
    await decide(
        session,
        checkpoint.id,
        policy,
        by="vouch",
        via=Channel.TIMEOUT,
        comment="No decision before the review deadline.",
        attempt=timer.attempt,
    )
    return True


async def process_due_timers(db: Database, settings: Settings, now: datetime | None = None, *, limit: int = 100) -> int:
    """Fire up to `limit` due timers, one transaction each; returns how many acted. `now` is injectable."""
    acted = 0
    async with db.reading() as session:
        # A read first: a round with nothing due (the first, at start) must not take SQLite's write lock.
        due = await session.scalar(sa.select(ReviewTimer.id).where(*_due(now or utcnow())).limit(1))
    if due is None:
        return 0
    for _ in range(limit):
        moment = now or utcnow()
        async with db.transaction() as session:
            timer = await _claim(session, moment)
            if timer is None:
                break
            if await fire(session, settings, timer, moment):
                acted += 1
    return acted


async def run_review_timers(db: Database, settings: Settings, looks: Looks, stop: asyncio.Event) -> None:
    """The worker's timer loop: woken by the beat's look alone, a reminder a few seconds late is no harm."""
    await run_woken(
        db,
        None,
        lambda: process_due_timers(db, settings),
        stop,
        looks=looks,
        look="review_timers",
        due=sa.select(ReviewTimer.id).where(*_due(NOW)),
        name="the worker's review timers",
        failure="review timers failed; retrying at the next wake-up",
    )
