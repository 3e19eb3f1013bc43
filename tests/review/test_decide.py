"""review.decide: the one decision function, its effects, refusals and first-answer-wins."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

import pytest
import sqlalchemy as sa

from api.auth import Caller
from api.schemas import CreateTaskIn
from api.tasks import create_execution
from core.bus import WAKE_CHANNEL
from core.db import Database
from core.events import events_after
from core.formatting import isoformat
from core.ids import new_id
from core.models import ApiKey, Checkpoint, Decision, Execution, utcnow
from core.run_entry import WAKE_UP_WINDOW
from core.settings import Settings
from core.vocabulary import Channel
from review import AlreadyDecided, DecisionError, DecisionRecord, NotAwaitingReview, NotReviewer, decide
from tests.conftest import make_account

REVIEWER = "reviewer@example.com"


async def paused_execution(
    db: Database, settings: Settings, *, awaiting: bool = True, max_revisions: int = 3, **fields: Any
) -> tuple[str, list[str]]:
    """An execution with two checkpoints; the first awaits review (as the runner leaves it)."""
    account = await make_account(db, settings, f"{new_id('u')}@example.com")
    task = CreateTaskIn.model_validate(
        {
            "taskName": "decide test",
            "taskDescription": 'Send an email to a@example.com saying "hi".',
            "testMode": "with-verification",
            "assignedReviewer": REVIEWER,
            "checkpoints": [
                {"stage": "Before sending", "verificationQuestion": "Send it?"},
                {"stage": "After sending", "verificationQuestion": "Was it right?"},
            ],
            "maxRevisions": max_revisions,
            **fields,
        }
    )
    async with db.transaction() as session:
        key_id = await session.scalar(sa.select(ApiKey.id).where(ApiKey.user_id == account.user_id))
        caller = Caller(account.user_id, account.email, str(key_id), frozenset({"eval:manage"}))
        execution = await create_execution(session, caller, task, "offline")
        checkpoints = list(
            await session.scalars(
                sa.select(Checkpoint.id).where(Checkpoint.execution_id == execution.id).order_by(Checkpoint.position)
            )
        )
        if awaiting:
            await session.execute(
                sa.update(Checkpoint)
                .where(Checkpoint.id == checkpoints[0])
                .values(status="awaiting_review", awaiting_since=utcnow())
            )
            await session.execute(
                sa.update(Execution)
                .where(Execution.id == execution.id)
                .values(status="awaiting_review", started_at=utcnow(), lease_epoch=1)
            )
        else:
            await session.execute(
                sa.update(Execution)
                .where(Execution.id == execution.id)
                .values(status="running", worker_id="worker-1", lease_until=utcnow() + timedelta(seconds=30))
            )
        return execution.id, checkpoints


async def state(db: Database, execution_id: str) -> dict[str, Any]:
    async with db.reading() as session:
        return {
            "execution": await session.get_one(Execution, execution_id),
            "checkpoints": list(
                await session.scalars(
                    sa.select(Checkpoint).where(Checkpoint.execution_id == execution_id).order_by(Checkpoint.position)
                )
            ),
            "decisions": list(await session.scalars(sa.select(Decision).where(Decision.execution_id == execution_id))),
            "events": [(e.seq, e.type, e.payload) for e in await events_after(session, execution_id)],
        }


async def test_approve(db: Database, settings: Settings) -> None:
    exe, (first, second) = await paused_execution(db, settings)
    before = utcnow()
    async with db.bus.subscribe(WAKE_CHANNEL) as wake:
        async with db.transaction() as session:
            record = await decide(
                session,
                first,
                "approve",
                by=REVIEWER,
                via=Channel.EMAIL,
                comment="looks fine",
                remote_addr="203.0.113.9",
            )
            assert await wake.get(timeout=0) is None, "the wake-up goes out only after commit"
        woken = await wake.get(timeout=5)
    assert woken is not None and woken["executionId"] == exe

    assert isinstance(record, DecisionRecord)
    assert (record.checkpoint_id, record.decision, record.by, record.via, record.comment) == (
        first,
        "approve",
        REVIEWER,
        "email",
        "looks fine",
    )
    assert before <= record.at <= utcnow()

    after = await state(db, exe)
    execution = after["execution"]
    # The run as the decision left it, for the worker's claim to be taken over by its first step.
    assert (woken["resume"]["epoch"], woken["resume"]["seq"]) == (execution.lease_epoch, execution.last_seq)
    assert [c.status for c in after["checkpoints"]] == ["approved", "pending"]
    (row,) = after["decisions"]
    assert (row.checkpoint_id, row.decision, row.decided_by, row.via, row.comment, row.remote_addr) == (
        first,
        "approve",
        REVIEWER,
        "email",
        "looks fine",
        "203.0.113.9",
    )
    execution = after["execution"]
    assert (execution.status, execution.worker_id) == ("running", None)
    # Kept for the worker its wake-up reaches, by a lease no worker holds: a search passes it by meanwhile.
    assert execution.lease_until is not None
    assert record.at < execution.lease_until <= record.at + WAKE_UP_WINDOW
    assert execution.completed_at is None
    seq, type_, payload = after["events"][-1]
    assert type_ == "checkpoint.decided"
    assert seq == execution.last_seq
    assert payload == {
        "checkpointId": first,
        "decision": "approve",
        "by": REVIEWER,
        "via": "email",
        "at": isoformat(record.at),
        "comment": "looks fine",
        "attempt": 1,
        "originalArgs": None,
        "editedArgs": None,
        "rating": None,
        "labels": None,
    }
    assert after["checkpoints"][1].id == second


async def test_reject_with_no_revisions_left_ends_the_run(db: Database, settings: Settings) -> None:
    exe, (first, _second) = await paused_execution(db, settings, max_revisions=0)
    async with db.bus.subscribe(WAKE_CHANNEL) as wake:
        async with db.transaction() as session:
            record = await decide(session, first, "reject", by=REVIEWER, via=Channel.CHAT, comment="wrong recipient")
        assert await wake.get(timeout=0.05) is None, "a rejection wakes no worker"
    after = await state(db, exe)
    assert [c.status for c in after["checkpoints"]] == ["rejected", "pending"]
    assert [(d.decision, d.via) for d in after["decisions"]] == [("reject", "chat")]
    execution = after["execution"]
    assert execution.status == "rejected"
    assert execution.completed_at is not None
    assert (execution.worker_id, execution.lease_until) == (None, None)
    assert [t for _, t, _ in after["events"][-2:]] == ["checkpoint.decided", "execution.rejected"]
    assert after["events"][-2][2]["decision"] == "reject"
    assert after["events"][-1][2] == {
        "status": "rejected",
        "checkpointId": first,
        "comment": "wrong recipient",
        "by": REVIEWER,
        "attempt": 1,
    }
    assert record.decision == "reject"


async def test_second_answer_is_refused_naming_the_first(db: Database, settings: Settings) -> None:
    exe, (first, _) = await paused_execution(db, settings)
    async with db.transaction() as session:
        winner = await decide(session, first, "approve", by=REVIEWER, via=Channel.EMAIL)
    before = await state(db, exe)
    with pytest.raises(AlreadyDecided) as refused:
        async with db.transaction() as session:
            await decide(session, first, "reject", by="bob@example.com", via=Channel.WEB, comment="no")
    message = str(refused.value)
    assert "already approved" in message
    assert REVIEWER in message
    assert "via email" in message
    assert str(isoformat(winner.at)) in message
    assert refused.value.record == winner
    assert refused.value.code == "already_decided"
    after = await state(db, exe)
    assert after["events"] == before["events"]
    assert len(after["decisions"]) == 1
    assert after["execution"].status == "running"


async def test_refusal_after_a_rejection_says_rejected(db: Database, settings: Settings) -> None:
    _exe, (first, _) = await paused_execution(db, settings)
    async with db.transaction() as session:
        await decide(session, first, "reject", by=REVIEWER, via=Channel.API, comment="no")
    with pytest.raises(AlreadyDecided, match=r"already rejected by reviewer@example\.com via api at "):
        async with db.transaction() as session:
            await decide(session, first, "reject", by=REVIEWER, via=Channel.API, comment="no")


async def test_pending_checkpoint_is_not_awaiting_review(db: Database, settings: Settings) -> None:
    exe, (first, second) = await paused_execution(db, settings)
    before = await state(db, exe)
    with pytest.raises(NotAwaitingReview) as refused:
        async with db.transaction() as session:
            await decide(session, second, "approve", by=REVIEWER, via=Channel.WEB)
    assert refused.value.code == "checkpoint_not_awaiting_review"
    after = await state(db, exe)
    assert after["events"] == before["events"]
    assert after["decisions"] == []
    assert [c.status for c in after["checkpoints"]] == ["awaiting_review", "pending"]
    assert after["checkpoints"][0].id == first


async def test_unknown_checkpoint_is_refused(db: Database) -> None:
    with pytest.raises(DecisionError):
        async with db.transaction() as session:
            await decide(session, "chk_doesnotexist", "approve", by=REVIEWER, via=Channel.WEB)


@pytest.mark.parametrize(("decision", "via"), [("maybe", "web"), ("approve", "pigeon")])
async def test_bad_arguments_are_refused(db: Database, settings: Settings, decision: str, via: str) -> None:
    exe, (first, _) = await paused_execution(db, settings)
    with pytest.raises(DecisionError):
        async with db.transaction() as session:
            await decide(session, first, decision, by=REVIEWER, via=via)  # type: ignore[arg-type]
    assert (await state(db, exe))["decisions"] == []


async def test_auto_passes_a_pending_checkpoint_without_touching_the_execution(
    db: Database, settings: Settings
) -> None:
    exe, (first, _) = await paused_execution(db, settings, awaiting=False)
    async with db.bus.subscribe(WAKE_CHANNEL) as wake:
        async with db.transaction() as session:
            record = await decide(session, first, "approve", by="vouch", via=Channel.AUTO)
        assert await wake.get(timeout=0.05) is None
    after = await state(db, exe)
    assert [c.status for c in after["checkpoints"]] == ["auto_approved", "pending"]
    assert record.via == "auto"
    execution = after["execution"]
    assert (execution.status, execution.worker_id) == ("running", "worker-1")
    assert after["events"][-1][1] == "checkpoint.decided"
    # A human cannot answer it afterwards.
    with pytest.raises(AlreadyDecided, match="via auto"):
        async with db.transaction() as session:
            await decide(session, first, "reject", by=REVIEWER, via=Channel.WEB, comment="no")


async def test_concurrent_answers_exactly_one_wins(db: Database, settings: Settings) -> None:
    exe, (first, _) = await paused_execution(db, settings)

    async def answer(n: int) -> DecisionRecord:
        async with db.transaction() as session:
            return await decide(
                session,
                first,
                "approve" if n % 2 else "reject",
                by=REVIEWER,
                via=(Channel.EMAIL, Channel.WEB, Channel.CHAT, Channel.API)[n % 4],
                comment=f"answer {n}",
            )

    outcomes = await asyncio.gather(*(answer(n) for n in range(10)), return_exceptions=True)
    wins = [o for o in outcomes if isinstance(o, DecisionRecord)]
    losses = [o for o in outcomes if not isinstance(o, DecisionRecord)]
    assert len(wins) == 1, outcomes
    (winner,) = wins
    assert len(losses) == 9
    for loss in losses:
        assert isinstance(loss, AlreadyDecided), repr(loss)
        assert loss.record == winner
        assert winner.by in str(loss)

    after = await state(db, exe)
    (row,) = after["decisions"]
    assert (row.decided_by, row.decision) == (winner.by, winner.decision)
    assert [t for _, t, _ in after["events"]].count("checkpoint.decided") == 1
    # The offline agent cannot revise from a comment: its rejection ends the run (issue 20).
    expected = ("approved", "running") if winner.decision == "approve" else ("rejected", "rejected")
    assert (after["checkpoints"][0].status, after["execution"].status) == expected
    assert [seq for seq, _, _ in after["events"]] == list(range(1, len(after["events"]) + 1))


async def test_a_person_who_may_not_decide_now_is_refused_whatever_the_channel_checked(
    db: Database, settings: Settings
) -> None:
    """The rule is asked again inside decide(): a channel that checked before a PATCH, or not at all, still
    cannot record a decision for someone who may not decide; the refusal rolls everything back."""
    exe, (first, _) = await paused_execution(db, settings, backupReviewer="backup@example.com")
    async with db.transaction() as session:
        await session.execute(
            sa.update(Execution).where(Execution.id == exe).values(assigned_reviewer="new@example.com")
        )
    before = await state(db, exe)
    for who, via in (
        (REVIEWER, Channel.EMAIL),
        (REVIEWER, Channel.CHAT),
        ("backup@example.com", Channel.WEB),
        ("owner@x.com", Channel.API),
    ):
        with pytest.raises(NotReviewer) as refused:
            async with db.transaction() as session:
                await decide(session, first, "approve", by=who, via=via)
        assert refused.value.code == "not_assigned_reviewer"
    after = await state(db, exe)
    assert (
        [c.status for c in after["checkpoints"]]
        == [c.status for c in before["checkpoints"]]
        == [
            "awaiting_review",
            "pending",
        ]
    )
    assert after["decisions"] == [] and after["events"] == before["events"]
    async with db.transaction() as session:
        record = await decide(session, first, "approve", by="new@example.com", via=Channel.API)
    assert record.by == "new@example.com"
