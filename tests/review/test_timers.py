"""Durable review timers with an injected clock: reminder, escalation and deadline fire once each,
also when a processor dies between claim and effect, and never for an attempt already decided."""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta

import pytest
import sqlalchemy as sa

from agents.worker import Worker
from core.bus import InProcessBus
from core.db import Database
from core.models import Checkpoint, Decision, Event, Execution, MailMessage, ReviewTimer, User, utcnow
from core.settings import Settings
from core.vocabulary import Channel
from review import decide
from review.access import may_decide
from review.timers import _claim, process_due_timers
from tests.agents.test_runner import BEFORE_SENDING, NOTE_THEN_MAIL, REVIEWER, claim_and_run, new_execution
from tests.support.processes import run_vouch
from tests.support.waiting import channel_of, until

BACKUP = "backup@example.com"
HOUR = timedelta(hours=1)


async def paused(db: Database, settings: Settings, **fields: object) -> tuple[str, Checkpoint]:
    exe = await new_execution(
        db, settings, NOTE_THEN_MAIL, checkpoints=[BEFORE_SENDING], test_mode="with-verification", **fields
    )
    await claim_and_run(db, settings)
    async with db.reading() as session:
        checkpoint = await session.scalar(sa.select(Checkpoint).where(Checkpoint.execution_id == exe))
        assert checkpoint is not None and checkpoint.status == "awaiting_review"
        return exe, checkpoint


async def review_events(db: Database, exe: str) -> list[str]:
    async with db.reading() as session:
        rows = await session.scalars(
            sa.select(Event.type).where(Event.execution_id == exe, Event.type.like("review.%")).order_by(Event.seq)
        )
        return list(rows)


async def timer_mail(db: Database, exe: str) -> list[tuple[str, str]]:
    async with db.reading() as session:
        rows = await session.execute(
            sa.select(MailMessage.recipient, MailMessage.message_key)
            .where(MailMessage.execution_id == exe, MailMessage.message_key.like("review-timer:%"))
            .order_by(MailMessage.created_at)
        )
        return [(r, k) for r, k in rows.all()]


async def backup_may_decide(db: Database, exe: str, checkpoint: Checkpoint, now: datetime) -> bool:
    async with db.reading() as session:
        execution = await session.get_one(Execution, exe)
        return await may_decide(session, execution, checkpoint, BACKUP, now)


async def test_reminder_escalation_deadline_fire_once_each(db: Database, settings: Settings) -> None:
    exe, checkpoint = await paused(db, settings, backupReviewer=BACKUP, reviewDeadline=6 * 3600)
    start = checkpoint.awaiting_since
    assert start is not None
    async with db.reading() as session:
        timers = {
            t.kind: t for t in await session.scalars(sa.select(ReviewTimer).where(ReviewTimer.execution_id == exe))
        }
    assert {k: t.due_at - start for k, t in timers.items()} == {
        "reminder": timedelta(minutes=settings.review_reminder_minutes),
        "escalation": timedelta(minutes=settings.review_escalation_minutes),
        "deadline": 6 * HOUR,
    }
    assert {t.attempt for t in timers.values()} == {1}

    assert await process_due_timers(db, settings, start + timedelta(minutes=59)) == 0
    assert await review_events(db, exe) == []

    at_reminder = start + timedelta(minutes=61)
    assert await process_due_timers(db, settings, at_reminder) == 1
    assert await process_due_timers(db, settings, at_reminder) == 0
    assert await review_events(db, exe) == ["review.reminder_sent"]
    assert await timer_mail(db, exe) == [(REVIEWER, f"review-timer:{timers['reminder'].id}")]
    assert not await backup_may_decide(db, exe, checkpoint, at_reminder)

    at_escalation = start + timedelta(minutes=241)
    assert await process_due_timers(db, settings, at_escalation) == 1
    assert await process_due_timers(db, settings, at_escalation) == 0
    assert await review_events(db, exe) == ["review.reminder_sent", "review.escalated"]
    assert [r for r, _ in await timer_mail(db, exe)] == [REVIEWER, BACKUP]
    assert await backup_may_decide(db, exe, checkpoint, at_escalation)

    at_deadline = start + 6 * HOUR + timedelta(seconds=1)
    assert await process_due_timers(db, settings, at_deadline) == 1
    assert await process_due_timers(db, settings, at_deadline + 100 * HOUR) == 0
    assert await review_events(db, exe) == ["review.reminder_sent", "review.escalated", "review.deadline_passed"]
    async with db.reading() as session:
        execution = await session.get_one(Execution, exe)
        (decision,) = await session.scalars(sa.select(Decision).where(Decision.execution_id == exe))
        fired = list(await session.scalars(sa.select(ReviewTimer.fired_at).where(ReviewTimer.execution_id == exe)))
    # The default policy: a deadline rejects, and a timeout's rejection is final (nobody to revise for).
    assert execution.status == "rejected"
    assert (decision.decision, decision.via, decision.decided_by, decision.attempt) == ("reject", "timeout", "vouch", 1)
    assert all(at is not None for at in fired)


async def test_a_processor_dying_between_claim_and_effect_does_not_double_fire(
    db: Database, settings: Settings
) -> None:
    exe, checkpoint = await paused(db, settings)
    assert checkpoint.awaiting_since is not None
    now = checkpoint.awaiting_since + 2 * HOUR

    class Died(Exception):
        pass

    with pytest.raises(Died):
        async with db.transaction() as session:
            assert await _claim(session, now) is not None
            raise Died  # the process is gone: its transaction (claim included) rolls back
    assert await review_events(db, exe) == []

    # A new worker after the restart: its own database connection pool.
    restarted = Database(settings.database_url, InProcessBus())
    try:
        assert await process_due_timers(restarted, settings, now) == 1
        assert await process_due_timers(restarted, settings, now) == 0
    finally:
        await restarted.dispose()
    assert await process_due_timers(db, settings, now) == 0
    assert await review_events(db, exe) == ["review.reminder_sent"]
    assert len(await timer_mail(db, exe)) == 1


async def test_timers_of_a_decided_attempt_never_fire(db: Database, settings: Settings) -> None:
    exe, checkpoint = await paused(db, settings, backupReviewer=BACKUP, reviewDeadline=60)
    async with db.transaction() as session:
        await decide(session, checkpoint.id, "approve", by=REVIEWER, via=Channel.WEB)
    assert checkpoint.awaiting_since is not None
    later = checkpoint.awaiting_since + 100 * HOUR
    assert await process_due_timers(db, settings, later) == 0
    assert await review_events(db, exe) == []
    assert await timer_mail(db, exe) == []
    async with db.reading() as session:
        fired = list(await session.scalars(sa.select(ReviewTimer.fired_at).where(ReviewTimer.execution_id == exe)))
    assert len(fired) == 3 and all(at is not None for at in fired)


@pytest.mark.parametrize(
    ("policy", "status", "decision"), [("approve", "running", "approve"), ("cancel", "cancelled", "cancel")]
)
async def test_deadline_policies(db: Database, settings: Settings, policy: str, status: str, decision: str) -> None:
    exe, checkpoint = await paused(db, settings, reviewDeadline=60, onDeadline=policy)
    assert checkpoint.awaiting_since is not None
    # The reminder (60 min) is later than this deadline (60 s): only the deadline acts.
    assert await process_due_timers(db, settings, checkpoint.awaiting_since + timedelta(seconds=61)) == 1
    async with db.reading() as session:
        execution = await session.get_one(Execution, exe)
        row = await session.scalar(sa.select(Decision).where(Decision.execution_id == exe))
    assert execution.status == status
    assert row is not None and (row.decision, row.via) == (decision, "timeout")
    assert await review_events(db, exe) == ["review.deadline_passed"]
    # A late human answer is refused, naming the timeout.
    with pytest.raises(Exception, match="via timeout"):
        async with db.transaction() as session:
            await decide(session, checkpoint.id, "approve", by=REVIEWER, via=Channel.WEB)


async def test_the_worker_fires_due_timers(db: Database, settings: Settings) -> None:
    quick = settings.with_changes(review_reminder_minutes=0.0, worker_poll_seconds=0.05)
    exe, _ = await paused(db, quick)
    stop = asyncio.Event()
    running = asyncio.create_task(Worker(quick, db, "timer-worker").run(stop))
    try:

        async def reminded() -> list[str] | None:
            found = await review_events(db, exe)
            return found or None

        assert await until(reminded, bus=db.bus, channel=channel_of(exe)) == ["review.reminder_sent"]
    finally:
        stop.set()
        await running
    assert await review_events(db, exe) == ["review.reminder_sent"]


async def test_a_disabled_reviewer_is_neither_reminded_nor_waited_for(db: Database, settings: Settings) -> None:
    """`vouch users disable` (run as operators run it) tells the owner of the waiting execution, brings the
    escalation forward so the backup is asked at the next poll, and no reminder goes to the disabled reviewer;
    `vouch users enable` makes them the reviewer again."""
    exe, checkpoint = await paused(db, settings, backupReviewer=BACKUP)
    start = checkpoint.awaiting_since
    assert start is not None
    for email in (REVIEWER, BACKUP):
        assert run_vouch(settings, "users", "create", email).returncode == 0
    async with db.reading() as session:
        owner = await session.scalar(sa.select(User.email).join(Execution, Execution.user_id == User.id))
    done = run_vouch(settings, "users", "disable", REVIEWER)
    assert done.returncode == 0, done.stderr
    assert done.stderr.splitlines() == [
        f"disabled {REVIEWER}",
        f"execution {exe} waited for {REVIEWER}: {owner} was told; escalated to {BACKUP}",
    ]
    async with db.reading() as session:
        (told,) = await session.scalars(sa.select(MailMessage).where(MailMessage.recipient == owner))
    assert told.execution_id == exe and "Reviewer disabled" in told.subject
    assert f"PATCH /api/eval/executions/{exe}" in told.text_body and f"{BACKUP}, is asked now" in told.text_body

    # Not four hours later: the escalation is due now, and the reminder finds nobody to remind.
    assert await process_due_timers(db, settings, utcnow() + timedelta(seconds=1)) == 1
    assert await process_due_timers(db, settings, start + timedelta(minutes=61)) == 0
    assert await review_events(db, exe) == ["review.escalated"]
    async with db.reading() as session:
        escalation = await session.scalar(sa.select(MailMessage.text_body).where(MailMessage.recipient == BACKUP))
    assert escalation is not None and f"{REVIEWER} can no longer decide this checkpoint" in escalation
    assert await backup_may_decide(db, exe, checkpoint, utcnow())
    assert not await reviewer_may(db, exe, checkpoint)

    enabled = run_vouch(settings, "users", "enable", REVIEWER)
    assert (enabled.returncode, enabled.stderr) == (0, f"enabled {REVIEWER}\n")
    assert await reviewer_may(db, exe, checkpoint)
    again = run_vouch(settings, "users", "enable", REVIEWER)
    assert (again.returncode, again.stderr) == (0, f"{REVIEWER} was not disabled\n")


async def reviewer_may(db: Database, exe: str, checkpoint: Checkpoint) -> bool:
    async with db.reading() as session:
        execution = await session.get_one(Execution, exe)
        return await may_decide(session, execution, checkpoint, REVIEWER, utcnow())
