"""The step after an approval, the one a reviewer waits on (issue 25): the claim hands back the call it lets through,
and the step's one statement records it, fenced by the claim, and ends the run with it when nothing else waits."""

from __future__ import annotations

from datetime import timedelta

import sqlalchemy as sa

from agents.runner import ExecutionRunner
from core.db import Database
from core.models import Execution, WebhookDelivery, utcnow
from core.settings import Settings
from core.vocabulary import Channel
from review import decide
from tests.agents.test_runner import REVIEWER, assert_contiguous, claim, claim_and_run, new_execution, snapshot

NOTE = 'Write a note called "a.md" saying "hello".'
BEFORE_WRITING = {"stage": "Write", "description": "the note", "verificationQuestion": "Write it?"}
SIGN_OFF = {"stage": "Sign-off", "verificationQuestion": "Happy with the summary?"}


async def approve_waiting(db: Database, execution_id: str) -> None:
    """Approve the checkpoint the execution waits at."""
    waiting = (await snapshot(db, execution_id)).payloads("checkpoint.awaiting_review")[-1]
    async with db.transaction() as session:
        await decide(session, waiting["checkpointId"], "approve", by=REVIEWER, via=Channel.WEB)


async def test_a_claim_taken_over_before_the_approved_step_writes_none_of_it(db: Database, settings: Settings) -> None:
    """The step reads nothing and fences nothing before its own statement: that statement is the fence. Taken over
    by a later claim of the same worker (only the epoch tells them apart), the stale claim writes no file, no
    record, no event, and leaves the run to its successor."""
    exe = await new_execution(db, settings, NOTE, checkpoints=[BEFORE_WRITING], test_mode="with-verification")
    await claim_and_run(db, settings)
    await approve_waiting(db, exe)
    stale = await claim(db)
    assert stale.entry is not None and stale.entry.step_call is not None  # the fast way in, as after any approval
    async with db.transaction() as session:
        await session.execute(
            sa.update(Execution).where(Execution.id == exe).values(lease_epoch=Execution.lease_epoch + 1)
        )
    before = await snapshot(db, exe)
    await ExecutionRunner(settings, db, "worker-1", stale).run()
    after = await snapshot(db, exe)
    assert after.events == before.events and after.types[-1] == "execution.resumed"
    assert after.files == [] and [(c.tool, c.status) for c in after.calls] == [("write_file", "proposed")]
    assert (after.execution.status, after.execution.lease_epoch) == ("running", stale.epoch + 1)
    assert after.execution.agent_state == before.execution.agent_state

    # Once the successor's lease runs out (it never ran), the next claim takes the step, once.
    async with db.transaction() as session:
        await session.execute(
            sa.update(Execution).where(Execution.id == exe).values(lease_until=utcnow() - timedelta(seconds=1))
        )
    await claim_and_run(db, settings)
    done = await snapshot(db, exe)
    assert done.execution.status == "completed"
    assert [(f.path, f.content) for f in done.files] == [("a.md", "hello")]
    assert done.types.count("tool.result") == 1
    assert_contiguous(done)


async def test_an_approved_last_step_does_not_end_a_run_whose_checkpoint_still_waits(
    db: Database, settings: Settings
) -> None:
    """The step is the plan's last, but the caller's sign-off guards the finish: the step is recorded, and the run
    pauses there instead of completing."""
    exe = await new_execution(db, settings, NOTE, checkpoints=[BEFORE_WRITING, SIGN_OFF], test_mode="with-verification")
    await claim_and_run(db, settings)
    assert (await snapshot(db, exe)).payloads("checkpoint.awaiting_review")[-1]["guards"]["tool"] == "write_file"
    await approve_waiting(db, exe)
    await claim_and_run(db, settings)
    paused = await snapshot(db, exe)
    assert paused.execution.status == "awaiting_review" and paused.execution.result is None
    assert [(f.path, f.content) for f in paused.files] == [("a.md", "hello")]
    assert [(c.tool, c.status) for c in paused.calls] == [("write_file", "succeeded")]
    waiting = paused.payloads("checkpoint.awaiting_review")[-1]
    assert (waiting["verificationQuestion"], waiting["guards"]["tool"]) == ("Happy with the summary?", "finish")
    assert "execution.completed" not in paused.types
    assert_contiguous(paused)

    await approve_waiting(db, exe)
    await claim_and_run(db, settings)
    done = await snapshot(db, exe)
    assert done.execution.status == "completed"
    assert done.execution.result is not None and done.execution.result["steps"] == ["wrote a.md (5 bytes)"]
    assert_contiguous(done)


async def test_an_approved_last_step_ends_the_run_with_every_step_in_its_result(
    db: Database, settings: Settings
) -> None:
    """The earlier steps' results, read before the last step's statement, and the last one's: the summary of all."""
    two_notes = 'Write a note called "a.md" saying "one". Write a note called "b.md" saying "three".'
    second = {"stage": "Second note", "description": "b.md", "verificationQuestion": "Write b.md?"}
    exe = await new_execution(db, settings, two_notes, checkpoints=[second], test_mode="with-verification")
    await claim_and_run(db, settings)
    assert (await snapshot(db, exe)).payloads("checkpoint.awaiting_review")[-1]["guards"]["step"] == 2
    await approve_waiting(db, exe)
    await claim_and_run(db, settings)
    done = await snapshot(db, exe)
    assert done.execution.status == "completed"
    assert done.execution.result is not None
    assert done.execution.result["steps"] == ["wrote a.md (3 bytes)", "wrote b.md (5 bytes)"]
    assert done.types[-4:] == ["execution.resumed", "tool.result", "agent.message", "execution.completed"]
    assert done.payloads("agent.message")[-1]["text"] == done.execution.result["summary"]
    assert_contiguous(done)


async def test_an_approved_last_step_of_a_run_with_a_webhook_queues_its_completion_once(
    db: Database, settings: Settings
) -> None:
    """The end written with the step (alone, on PostgreSQL) is only for a run whose end calls for nothing else: with
    a webhook the step is recorded first and the end, with its outbox row, follows; one completion either way."""
    exe = await new_execution(
        db,
        settings,
        NOTE,
        checkpoints=[BEFORE_WRITING],
        test_mode="with-verification",
        webhookUrl="https://hooks.example.com/vouch",
    )
    await claim_and_run(db, settings)
    await approve_waiting(db, exe)
    await claim_and_run(db, settings)
    done = await snapshot(db, exe)
    assert done.execution.status == "completed"
    assert [(f.path, f.content) for f in done.files] == [("a.md", "hello")]
    assert done.types.count("execution.completed") == 1
    assert_contiguous(done)
    async with db.reading() as session:
        queued = (
            await session.execute(
                sa.select(WebhookDelivery.event_type, WebhookDelivery.url).where(WebhookDelivery.execution_id == exe)
            )
        ).all()
    assert [tuple(row) for row in queued] == [("execution.completed", "https://hooks.example.com/vouch")]
