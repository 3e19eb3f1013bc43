"""agents.runner.ExecutionRunner driven directly: runs, pauses, resumes, fencing, exactly-once effects."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import pytest
import sqlalchemy as sa

from agents import offline
from agents.claims import RUNNABLE, Claim, claim_execution, claim_next
from agents.gates import UNKNOWN_OUTCOME_STAGE
from agents.offline_steps import OfflineDriver
from agents.runner import ExecutionRunner
from agents.tools import TOOLS
from api.auth import Caller
from api.schemas import CreateTaskIn
from api.tasks import create_execution
from core.db import Database
from core.events import events_after
from core.ids import new_id
from core.models import ApiKey, Checkpoint, Decision, Execution, MailMessage, ToolCall, WorkspaceFile, utcnow
from core.settings import Settings
from core.vocabulary import Channel
from review import decide
from tests.conftest import make_account
from tests.support.waiting import channel_of, until

REVIEWER = "reviewer@example.com"
NOTE_THEN_MAIL = (
    'Write a note named "draft.md" saying "draft". '
    'Send an email to Boss@Example.com with subject "Report" and body "See the draft".'
)
BEFORE_SENDING = {"stage": "Before sending", "verificationQuestion": "OK to send the email?"}


async def new_execution(
    db: Database,
    settings: Settings,
    description: str,
    *,
    checkpoints: list[dict[str, str]] | None = None,
    test_mode: str = "without-verification",
    agent_model: str = "offline",
    **fields: Any,
) -> str:
    account = await make_account(db, settings, f"{new_id('u')}@example.com")
    task = CreateTaskIn.model_validate(
        {
            "taskName": "runner test",
            "taskDescription": description,
            "testMode": test_mode,
            "checkpoints": checkpoints or [],
            "assignedReviewer": REVIEWER,
            **fields,
        }
    )
    async with db.transaction() as session:
        key_id = await session.scalar(sa.select(ApiKey.id).where(ApiKey.user_id == account.user_id))
        caller = Caller(account.user_id, account.email, str(key_id), frozenset({"eval:manage"}))
        return (await create_execution(session, caller, task, agent_model)).id


async def claim(db: Database, worker_id: str = "worker-1") -> Claim:
    """The oldest runnable execution, claimed as the worker its wake-up reaches claims it: by id. A run a decision
    just let go on is kept for that claim (core/run_entry.py WAKE_UP_WINDOW); a search passes it by meanwhile."""
    async with db.reading() as session:
        waiting = list(
            await session.scalars(
                sa.select(Execution.id).where(Execution.status.in_(RUNNABLE)).order_by(Execution.created_at)
            )
        )
    for execution_id in waiting:
        got = await claim_execution(db, worker_id, 30, execution_id)
        if got is not None:
            return got
    raise AssertionError(f"nothing to claim among {waiting}")


async def claim_and_run(db: Database, settings: Settings, worker_id: str = "worker-1") -> Claim:
    got = await claim(db, worker_id)
    await asyncio.wait_for(ExecutionRunner(settings, db, worker_id, got).run(), 20)
    return got


@dataclass
class Snapshot:
    execution: Execution
    events: list[tuple[int, str, dict[str, Any]]]
    calls: list[ToolCall]
    mails: list[MailMessage]
    checkpoints: list[Checkpoint]
    decisions: list[Decision]
    files: list[WorkspaceFile]

    @property
    def types(self) -> list[str]:
        return [t for _, t, _ in self.events]

    def payloads(self, type_: str) -> list[dict[str, Any]]:
        return [p for _, t, p in self.events if t == type_]


async def snapshot(db: Database, execution_id: str) -> Snapshot:
    async with db.reading() as session:

        async def rows(model: Any, *order: Any) -> list[Any]:
            where = model.execution_id == execution_id
            return list(await session.scalars(sa.select(model).where(where).order_by(*order)))

        return Snapshot(
            execution=await session.get_one(Execution, execution_id),
            events=[(e.seq, e.type, e.payload) for e in await events_after(session, execution_id)],
            calls=await rows(ToolCall, ToolCall.step_index),
            # The agent's own mail (its tools'); the review mail to the reviewer is tested in tests/review.
            mails=[m for m in await rows(MailMessage, MailMessage.created_at) if m.message_key.startswith("tool:")],
            checkpoints=await rows(Checkpoint, Checkpoint.position),
            decisions=await rows(Decision, Decision.decided_at),
            files=await rows(WorkspaceFile, WorkspaceFile.path),
        )


def assert_contiguous(snap: Snapshot) -> None:
    assert [seq for seq, _, _ in snap.events] == list(range(1, len(snap.events) + 1))
    assert snap.execution.last_seq == len(snap.events)


async def take_over(db: Database, execution_id: str) -> None:
    """What another worker's claim does to the row once it believes the lease ran out."""
    async with db.transaction() as session:
        await session.execute(
            sa.update(Execution)
            .where(Execution.id == execution_id)
            .values(worker_id="worker-2", lease_epoch=Execution.lease_epoch + 1)
        )


async def wait_for_tool_call(db: Database, execution_id: str, tool: str) -> ToolCall:
    async def started() -> ToolCall | None:
        async with db.reading() as session:
            return await session.scalar(
                sa.select(ToolCall).where(ToolCall.execution_id == execution_id, ToolCall.tool == tool)
            )

    return await until(started, bus=db.bus, channel=channel_of(execution_id))


# --- without verification ---------------------------------------------------------------------------


async def test_without_verification_runs_to_completion(db: Database, settings: Settings) -> None:
    exe = await new_execution(
        db,
        settings,
        NOTE_THEN_MAIL,
        checkpoints=[{"stage": "Draft", "verificationQuestion": "May I write the note?"}, BEFORE_SENDING],
    )
    await claim_and_run(db, settings)
    snap = await snapshot(db, exe)

    assert snap.execution.status == "completed"
    assert snap.execution.completed_at is not None
    assert snap.execution.worker_id is None and snap.execution.lease_until is None
    assert snap.execution.error is None
    assert snap.execution.result is not None
    assert snap.execution.result["steps"] == [
        "wrote draft.md (5 bytes)",
        "sent an e-mail to boss@example.com ('Report')",
    ]
    assert snap.execution.result["summary"].startswith("Completed 2 step(s)")

    assert [c.status for c in snap.checkpoints] == ["auto_approved", "auto_approved"]
    assert [(d.checkpoint_id, d.decision, d.via, d.decided_by) for d in snap.decisions] == [
        (snap.checkpoints[0].id, "approve", "auto", "vouch"),
        (snap.checkpoints[1].id, "approve", "auto", "vouch"),
    ]

    assert snap.types == [
        "execution.created",
        "execution.started",
        "agent.message",  # the plan
        "checkpoint.decided",  # gates the note
        "agent.message",
        "tool.call",
        "tool.result",  # write_file
        "checkpoint.decided",  # gates the e-mail
        "agent.message",
        "tool.call",
        "tool.result",  # send_email
        "agent.message",  # summary
        "execution.completed",
    ]
    assert_contiguous(snap)
    assert [p["via"] for p in snap.payloads("checkpoint.decided")] == ["auto", "auto"]
    assert snap.payloads("execution.completed")[0]["status"] == "completed"
    assert "draft.md" in snap.payloads("agent.message")[0]["text"]

    assert [(c.step_index, c.tool, c.status) for c in snap.calls] == [
        (0, "write_file", "succeeded"),
        (1, "send_email", "succeeded"),
    ]
    assert [p["toolCallId"] for p in snap.payloads("tool.call")] == [c.id for c in snap.calls]
    assert [p["actsOnWorld"] for p in snap.payloads("tool.call")] == [False, True]
    assert [p["toolCallId"] for p in snap.payloads("tool.result")] == [c.id for c in snap.calls]

    (mail,) = snap.mails
    assert mail.status == "dev_mailbox"
    assert (mail.recipient, mail.subject, mail.text_body) == ("boss@example.com", "Report", "See the draft")
    assert mail.sender == settings.mail_from
    assert mail.message_key == f"tool:{snap.calls[1].id}"
    assert mail.execution_id == exe
    assert snap.payloads("tool.result")[1]["result"] == {
        "messageId": mail.id,
        "to": "boss@example.com",
        "subject": "Report",
        "delivery": "dev_mailbox",
    }

    (note,) = snap.files
    assert (note.path, note.content) == ("draft.md", "draft")
    assert snap.payloads("tool.result")[0]["result"] == {"path": "draft.md", "bytes": 5}


async def test_mail_is_queued_for_smtp_when_configured(db: Database, settings: Settings) -> None:
    exe = await new_execution(db, settings, "Send an email to a@example.com saying hi")
    await claim_and_run(db, settings.with_changes(smtp_url="smtp://127.0.0.1:1"))
    (mail,) = (await snapshot(db, exe)).mails
    assert mail.status == "queued"
    assert mail.next_attempt_at is not None


async def test_wait_step_completes(db: Database, settings: Settings) -> None:
    exe = await new_execution(db, settings, "Wait 0.2 seconds.")
    await claim_and_run(db, settings)
    snap = await snapshot(db, exe)
    assert snap.execution.status == "completed"
    (call,) = snap.calls
    assert (call.tool, call.status, call.result) == ("wait", "succeeded", {"waitedSeconds": 0.2})
    assert call.finished_at is not None
    assert call.finished_at - call.started_at >= timedelta(seconds=0.2)


async def test_task_with_no_known_step_fails_not_understood(db: Database, settings: Settings) -> None:
    exe = await new_execution(db, settings, "Paint the fence green.")
    await claim_and_run(db, settings)
    snap = await snapshot(db, exe)
    assert snap.execution.status == "failed"
    assert snap.calls == []
    assert snap.execution.result is None
    assert snap.execution.error_info is not None
    assert snap.execution.error_info["code"] == "task_not_understood"
    assert snap.execution.error_info["instructions"] == ["Paint the fence green"]


# --- with verification: pause and resume --------------------------------------------------------------


async def test_pause_is_data_and_resume_continues_from_the_cursor(db: Database, settings: Settings) -> None:
    exe = await new_execution(db, settings, NOTE_THEN_MAIL, checkpoints=[BEFORE_SENDING], test_mode="with-verification")
    first = await claim_and_run(db, settings)
    paused = await snapshot(db, exe)

    assert paused.execution.status == "awaiting_review"
    assert paused.execution.worker_id is None
    assert paused.execution.lease_until is None
    (checkpoint,) = paused.checkpoints
    assert checkpoint.status == "awaiting_review"
    assert checkpoint.awaiting_since is not None
    assert paused.decisions == []
    # The mail's call is on record, held back by the checkpoint that guards it (and may approve it edited).
    assert [(c.tool, c.status) for c in paused.calls] == [("write_file", "succeeded"), ("send_email", "proposed")]
    assert checkpoint.tool_call_id == paused.calls[1].id
    assert paused.mails == []
    assert paused.execution.agent_state is not None and paused.execution.agent_state["cursor"] == 1
    assert paused.types[-1] == "checkpoint.awaiting_review"
    waiting = paused.payloads("checkpoint.awaiting_review")[0]
    assert waiting["checkpointId"] == checkpoint.id
    assert waiting["verificationQuestion"] == "OK to send the email?"
    assert waiting["nextAction"]["tool"] == "send_email"
    assert waiting["nextAction"]["args"]["to"] == "boss@example.com"
    assert_contiguous(paused)

    # Paused: no worker may pick it up.
    assert await claim_next(db, "worker-2", 30) is None

    async with db.transaction() as session:
        await decide(session, checkpoint.id, "approve", by=REVIEWER, via=Channel.WEB, comment="go ahead")

    second = await claim_and_run(db, settings, "worker-2")
    assert second.execution_id == exe
    assert second.epoch == first.epoch + 1
    done = await snapshot(db, exe)

    assert done.execution.status == "completed"
    assert done.checkpoints[0].status == "approved"
    assert [(d.decision, d.via, d.decided_by, d.comment) for d in done.decisions] == [
        ("approve", "web", REVIEWER, "go ahead")
    ]
    assert [(c.step_index, c.tool, c.status) for c in done.calls] == [
        (0, "write_file", "succeeded"),
        (1, "send_email", "succeeded"),
    ]
    # The first step was not redone: same row, same finish time, one tool.call event per step.
    assert (done.calls[0].id, done.calls[0].finished_at) == (paused.calls[0].id, paused.calls[0].finished_at)
    assert [p["tool"] for p in done.payloads("tool.call")] == ["write_file", "send_email"]
    assert done.files[0].updated_at == paused.files[0].updated_at
    (mail,) = done.mails
    assert mail.recipient == "boss@example.com"

    assert done.events[: len(paused.events)] == paused.events
    # The mail's announcement and call came before the pause (the checkpoint held that call back).
    assert done.types[len(paused.events) :] == [
        "checkpoint.decided",
        "execution.resumed",
        "tool.result",
        "agent.message",
        "execution.completed",
    ]
    assert done.payloads("execution.resumed") == [{"worker": "worker-2"}]
    assert_contiguous(done)
    assert await claim_next(db, "worker-3", 30) is None


async def test_checkpoint_before_finishing_pauses_then_completes(db: Database, settings: Settings) -> None:
    exe = await new_execution(
        db,
        settings,
        'Write a note saying "fence painted".',
        # Names a summary, and the plan has none: it guards the finish.
        checkpoints=[{"stage": "Sign-off", "verificationQuestion": "Happy with the summary?"}],
        test_mode="with-verification",
    )
    await claim_and_run(db, settings)
    paused = await snapshot(db, exe)
    assert paused.execution.status == "awaiting_review"
    assert paused.payloads("checkpoint.awaiting_review")[0]["nextAction"]["tool"] == "finish"
    async with db.transaction() as session:
        await decide(session, paused.checkpoints[0].id, "approve", by=REVIEWER, via=Channel.EMAIL)
    await claim_and_run(db, settings)
    assert (await snapshot(db, exe)).execution.status == "completed"


async def test_rejected_execution_is_not_resumed(db: Database, settings: Settings) -> None:
    # maxRevisions 0: the first rejection is final (tests/review/test_revise.py covers revising).
    exe = await new_execution(
        db, settings, NOTE_THEN_MAIL, checkpoints=[BEFORE_SENDING], test_mode="with-verification", maxRevisions=0
    )
    await claim_and_run(db, settings)
    checkpoint = (await snapshot(db, exe)).checkpoints[0]
    async with db.transaction() as session:
        await decide(session, checkpoint.id, "reject", by=REVIEWER, via=Channel.CHAT, comment="no")
    assert await claim_next(db, "worker-2", 30) is None
    snap = await snapshot(db, exe)
    assert snap.execution.status == "rejected"
    assert snap.mails == []
    # The held mail's call stays proposed: never started, never run.
    assert [(c.tool, c.status) for c in snap.calls] == [("write_file", "succeeded"), ("send_email", "proposed")]


# --- fencing -----------------------------------------------------------------------------------------


async def test_stale_claim_writes_nothing(db: Database, settings: Settings) -> None:
    exe = await new_execution(db, settings, NOTE_THEN_MAIL)
    stale = await claim(db)
    await take_over(db, exe)
    before = await snapshot(db, exe)
    await ExecutionRunner(settings, db, "worker-1", stale).run()
    after = await snapshot(db, exe)
    # The stale claim's own event, written with the claim, and nothing after it.
    assert (
        after.events
        == before.events
        == [
            (1, "execution.created", before.events[0][2]),
            (2, "execution.started", {"worker": "worker-1"}),
        ]
    )
    assert after.calls == [] and after.mails == [] and after.files == []
    assert after.execution.status == "running"
    assert after.execution.worker_id == "worker-2"
    assert after.execution.lease_until == before.execution.lease_until
    assert after.execution.agent_state is None


async def test_worker_id_mismatch_is_fenced_too(db: Database, settings: Settings) -> None:
    exe = await new_execution(db, settings, NOTE_THEN_MAIL)
    got = await claim(db)
    await ExecutionRunner(settings, db, "someone-else", got).run()
    snap = await snapshot(db, exe)
    assert snap.types == ["execution.created", "execution.started"]  # the claim's, not the runner's
    assert snap.calls == []


async def test_lease_lost_mid_step_stops_before_recording(db: Database, settings: Settings) -> None:
    exe = await new_execution(db, settings, "Wait 1 second. Send an email to x@example.com saying hi.")
    got = await claim(db)
    task = asyncio.create_task(ExecutionRunner(settings, db, "worker-1", got).run())
    try:
        await wait_for_tool_call(db, exe, "wait")
        await take_over(db, exe)
        await asyncio.wait_for(task, 10)
    finally:
        task.cancel()
    snap = await snapshot(db, exe)
    assert [(c.tool, c.status) for c in snap.calls] == [("wait", "started")]
    assert "tool.result" not in snap.types
    assert snap.types[-1] == "tool.call"
    assert snap.mails == []
    assert snap.execution.worker_id == "worker-2"
    assert snap.execution.agent_state is not None and snap.execution.agent_state["cursor"] == 0


async def test_lease_lost_between_steps_leaves_the_next_step_unwritten(
    db: Database, settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The second write_file step is the claim's common step: on PostgreSQL one statement committing by itself
    # (agents/tool_calls.py run_in_place). Its fence fails, so none of it may be written: file, call or events.
    two_notes = 'Write a note called "a.md" saying "one". Write a note called "b.md" saying "two".'
    exe = await new_execution(db, settings, two_notes)
    advance = OfflineDriver.advance

    async def taken_over_after_the_first_step(driver: OfflineDriver, state: dict[str, Any]) -> bool:
        if state["cursor"] == 1:
            await take_over(db, exe)
        return await advance(driver, state)

    monkeypatch.setattr(OfflineDriver, "advance", taken_over_after_the_first_step)
    await ExecutionRunner(settings, db, "worker-1", await claim(db)).run()
    snap = await snapshot(db, exe)
    assert [f.path for f in snap.files] == ["a.md"]
    assert [(c.step_index, c.tool, c.status) for c in snap.calls] == [(0, "write_file", "succeeded")]
    assert snap.types[-1] == "tool.result" and len(snap.payloads("tool.result")) == 1
    assert snap.execution.worker_id == "worker-2" and snap.execution.status == "running"
    assert snap.execution.agent_state is not None and snap.execution.agent_state["cursor"] == 1
    assert_contiguous(snap)


async def test_lease_renewal_notices_a_takeover_and_stops_the_run(db: Database, settings: Settings) -> None:
    quick = settings.with_changes(worker_lease_seconds=0.3)  # renewed every 0.1 s
    exe = await new_execution(db, settings, "Wait 30 seconds. Send an email to x@example.com saying hi.")
    got = await claim(db)
    task = asyncio.create_task(ExecutionRunner(quick, db, "worker-1", got).run())
    try:
        await wait_for_tool_call(db, exe, "wait")
        await take_over(db, exe)
        done, _ = await asyncio.wait({task}, timeout=10)
        assert task in done, "the renewer should stop a run whose lease was taken"
    finally:
        task.cancel()
    snap = await snapshot(db, exe)
    assert [(c.tool, c.status) for c in snap.calls] == [("wait", "started")]
    assert snap.mails == []
    assert snap.execution.worker_id == "worker-2"


async def test_renewal_extends_the_lease(db: Database, settings: Settings) -> None:
    quick = settings.with_changes(worker_lease_seconds=0.6)  # renewed every 0.2 s
    exe = await new_execution(db, settings, "Wait 30 seconds.")
    got = await claim(db)
    async with db.reading() as session:
        initial = (await session.get_one(Execution, exe)).lease_until
    assert initial is not None
    task = asyncio.create_task(ExecutionRunner(quick, db, "worker-1", got).run())
    try:

        async def renewed() -> bool | None:
            async with db.reading() as session:
                row = await session.get_one(Execution, exe)
            # The claim gave 30 s; renewals give 0.6 s from now, so a renewal *shortens* it here.
            # What matters: the worker keeps writing a fresh lease_until while it works.
            return True if row.lease_until is not None and row.lease_until < initial else None

        await until(renewed, timeout=5)
        async with db.reading() as session:
            first = (await session.get_one(Execution, exe)).lease_until

        async def moved_on() -> bool | None:
            async with db.reading() as session:
                row = await session.get_one(Execution, exe)
            return True if row.lease_until is not None and first is not None and row.lease_until > first else None

        await until(moved_on, timeout=5)
        assert await claim_next(db, "worker-2", 30) is None
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


# --- crashes and failures ----------------------------------------------------------------------------


async def test_started_tool_call_is_completed_exactly_once_on_resume(db: Database, settings: Settings) -> None:
    """A crash between recording the intent and recording the result."""
    description = 'Send an email to x@example.com with subject "Once" and body "Only once".'
    exe = await new_execution(db, settings, description)
    got = await claim(db)
    state, plan = offline.initial_state(description, [])
    intent = ToolCall(
        id=new_id("call"),
        execution_id=exe,
        step_index=0,
        tool="send_email",
        args=plan[0]["args"],
        status="started",
        started_at=utcnow() - timedelta(seconds=5),
    )
    async with db.transaction() as session:
        await session.execute(
            sa.update(Execution).where(Execution.id == exe).values(agent_state=state, agent_plan=plan)
        )
        session.add(intent)

    await ExecutionRunner(settings, db, "worker-1", got).run()
    snap = await snapshot(db, exe)
    assert snap.execution.status == "completed"
    (call,) = snap.calls
    assert (call.id, call.status) == (intent.id, "succeeded")
    (mail,) = snap.mails
    assert mail.message_key == f"tool:{intent.id}"
    assert (mail.recipient, mail.subject, mail.text_body) == ("x@example.com", "Once", "Only once")
    assert "tool.call" not in snap.types, "the intent was already announced before the crash"
    assert snap.types.count("tool.result") == 1
    assert_contiguous(snap)


async def test_a_started_call_that_may_not_run_twice_waits_for_a_human(db: Database, settings: Settings) -> None:
    """A crash after a POST went out and before its result was recorded: whether it happened is unknown, so the
    resumed run asks the reviewer (an "outcome unknown" checkpoint) instead of posting again."""
    description = 'Write a note called a.md saying "hi".'
    exe = await new_execution(db, settings, description, test_mode="with-verification")
    got = await claim(db)
    state, _ = offline.initial_state(description, [])
    post = {"method": "POST", "url": "https://hooks.example.com/deploy", "body": "go"}
    plan = [{"tool": "http_request", "args": post, "instruction": "POST to the deploy hook"}]
    intent = ToolCall(
        id=new_id("call"),
        execution_id=exe,
        step_index=0,
        tool="http_request",
        args=post,
        status="started",
        started_at=utcnow() - timedelta(seconds=5),
    )
    assert not TOOLS["http_request"].repeatable(post)
    async with db.transaction() as session:
        await session.execute(
            sa.update(Execution).where(Execution.id == exe).values(agent_state=state, agent_plan=plan)
        )
        session.add(intent)
    await ExecutionRunner(settings, db, "worker-1", got).run()
    snap = await snapshot(db, exe)
    assert snap.execution.status == "awaiting_review"
    (call,) = snap.calls
    assert (call.id, call.status, call.result) == (intent.id, "started", None)
    (asked,) = snap.payloads("checkpoint.awaiting_review")
    assert asked["stage"] == UNKNOWN_OUTCOME_STAGE and asked["toolCallId"] == intent.id


async def test_resumed_wait_only_waits_what_is_left(db: Database, settings: Settings) -> None:
    description = "Wait 120 seconds."
    exe = await new_execution(db, settings, description)
    got = await claim(db)
    state, plan = offline.initial_state(description, [])
    async with db.transaction() as session:
        await session.execute(
            sa.update(Execution).where(Execution.id == exe).values(agent_state=state, agent_plan=plan)
        )
        session.add(
            ToolCall(
                id=new_id("call"),
                execution_id=exe,
                step_index=0,
                tool="wait",
                args={"seconds": 120.0},
                status="started",
                started_at=utcnow() - timedelta(seconds=200),
            )
        )
    await asyncio.wait_for(ExecutionRunner(settings, db, "worker-1", got).run(), 10)
    assert (await snapshot(db, exe)).execution.status == "completed"


@pytest.mark.parametrize(
    ("model", "says"),
    [
        ("openai:gpt-4o", "set OPENAI_API_KEY, or VOUCH_AGENT_BASE_URL"),
        ("mistral:large", "'offline', 'external', 'openai:<model>' or 'anthropic:<model>'"),
    ],
)
async def test_an_agent_model_that_cannot_run_fails_clearly(
    db: Database, settings: Settings, monkeypatch: pytest.MonkeyPatch, model: str, says: str
) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    exe = await new_execution(db, settings, NOTE_THEN_MAIL, agent_model=model)
    await claim_and_run(db, settings)
    snap = await snapshot(db, exe)
    assert snap.execution.status == "failed"
    assert snap.execution.error is not None
    assert says in snap.execution.error
    assert snap.execution.completed_at is not None
    assert snap.execution.worker_id is None and snap.execution.lease_until is None
    assert snap.types == ["execution.created", "execution.started", "execution.failed"]
    assert snap.execution.error_info == {"code": "model_unavailable", "detail": snap.execution.error}
    assert snap.payloads("execution.failed") == [{"status": "failed", "error": snap.execution.error_info}]
    assert snap.calls == []
    assert_contiguous(snap)


async def test_a_failing_tool_fails_the_execution(
    db: Database, settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def broken(*_args: Any) -> dict[str, Any]:
        raise RuntimeError("disk on fire")

    def broken_write(*_args: Any) -> None:
        raise RuntimeError("disk on fire")

    # Both ways a write_file step can take: its record, or its single write (agents/tool_calls.py run_in_place).
    monkeypatch.setattr(TOOLS["write_file"], "record", broken)
    monkeypatch.setattr(TOOLS["write_file"], "single_write", broken_write)
    exe = await new_execution(db, settings, NOTE_THEN_MAIL)
    await claim_and_run(db, settings)
    snap = await snapshot(db, exe)
    assert snap.execution.status == "failed"
    assert snap.execution.error == "RuntimeError: disk on fire"
    assert snap.types[-1] == "execution.failed"
    assert snap.mails == [] and snap.files == []
    assert_contiguous(snap)
