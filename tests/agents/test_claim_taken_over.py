"""A run let go on by a reviewer's approval is claimed by its first step (issue 25): the decision hands the worker
the run as it left it (`core.run_entry.Resume`, with the wake-up), and the step's statement claims the row too,
holding only while the row still has the epoch and seq the decision left. When it does not, nothing is written and
the run is claimed as usual, once."""

from __future__ import annotations

import asyncio
from typing import Any

import sqlalchemy as sa

from agents.claims import Claim, claim_to_take_over
from agents.runner import ExecutionRunner
from core.bus import WAKE_CHANNEL
from core.db import Database
from core.events import append_any_event
from core.models import EVENTS
from core.run_entry import Entry, Resume
from core.settings import Settings
from core.vocabulary import Channel
from review import decide
from tests.agents.test_approved_step import BEFORE_WRITING, NOTE
from tests.agents.test_runner import REVIEWER, assert_contiguous, claim, claim_and_run, new_execution, snapshot


async def approved(db: Database, settings: Settings) -> tuple[str, dict[str, Any]]:
    """A run paused before its one write_file step, approved: its id and the wake-up the approval sent."""
    exe = await new_execution(db, settings, NOTE, checkpoints=[BEFORE_WRITING], test_mode="with-verification")
    await claim_and_run(db, settings)
    waiting = (await snapshot(db, exe)).payloads("checkpoint.awaiting_review")[-1]
    async with db.bus.subscribe(WAKE_CHANNEL) as wake:
        async with db.transaction() as session:
            await decide(session, waiting["checkpointId"], "approve", by=REVIEWER, via=Channel.WEB)
        woken = await wake.get(timeout=5)
    assert woken is not None and woken["executionId"] == exe
    return exe, woken


async def hint_of(exe: str, woken: dict[str, Any]) -> Resume:
    resume = Resume.from_json(exe, woken.get("resume"))
    assert resume is not None
    return resume


def taken_over(exe: str, resume: Resume) -> Claim:
    claim = claim_to_take_over(exe, resume)
    assert claim is not None and claim.resume is resume
    return claim


async def run(db: Database, settings: Settings, claim: Claim, worker_id: str = "worker-1") -> None:
    await asyncio.wait_for(ExecutionRunner(settings, db, worker_id, claim).run(), 20)


async def created_at_after(db: Database, exe: str, seq: int) -> list[tuple[str, Any]]:
    async with db.reading() as session:
        rows = await session.execute(
            sa.select(EVENTS.c.type, EVENTS.c.created_at)
            .where(EVENTS.c.execution_id == exe, EVENTS.c.seq > seq)
            .order_by(EVENTS.c.seq)
        )
        return [tuple(row) for row in rows]


async def test_the_step_after_an_approval_claims_the_run_with_its_own_statement(
    db: Database, settings: Settings
) -> None:
    exe, woken = await approved(db, settings)
    resume = await hint_of(exe, woken)
    decided = await snapshot(db, exe)
    # What the hint says is the row as the decision left it.
    assert (resume.epoch, resume.seq) == (decided.execution.lease_epoch, decided.execution.last_seq)
    assert (resume.entry.state, resume.entry.plan) == (decided.execution.agent_state, decided.execution.agent_plan)
    assert resume.entry.step_call is not None and resume.entry.step_call.call is not None
    assert resume.entry.step_call.call.id == decided.calls[0].id

    await run(db, settings, taken_over(exe, resume))
    done = await snapshot(db, exe)
    assert done.execution.status == "completed"
    assert [(f.path, f.content) for f in done.files] == [("a.md", "hello")]
    assert [(c.tool, c.status) for c in done.calls] == [("write_file", "succeeded")]
    assert done.types[decided.execution.last_seq :] == [
        "execution.resumed", "tool.result", "agent.message", "execution.completed",
    ]  # fmt: skip
    assert done.execution.lease_epoch == resume.epoch + 1
    assert_contiguous(done)
    # One statement (on SQLite, one transaction): the claim's event and the step's carry the one time they were
    # written at.
    assert len({at for _type, at in await created_at_after(db, exe, decided.execution.last_seq)}) == 1


async def test_a_hint_another_claim_has_moved_past_writes_nothing(db: Database, settings: Settings) -> None:
    """Another worker claimed the run after the decision (its lease is live): the hinted first step writes nothing,
    the usual claim finds nothing to claim, and the other worker's run takes the step, once."""
    exe, woken = await approved(db, settings)
    resume = await hint_of(exe, woken)
    other = await claim(db, "worker-2")
    before = await snapshot(db, exe)

    await run(db, settings, taken_over(exe, resume))
    after = await snapshot(db, exe)
    assert after.events == before.events and after.files == []
    assert (after.execution.worker_id, after.execution.lease_epoch) == ("worker-2", other.epoch)

    await run(db, settings, other, "worker-2")
    done = await snapshot(db, exe)
    assert done.execution.status == "completed"
    assert [(f.path, f.content) for f in done.files] == [("a.md", "hello")]
    assert done.types.count("execution.resumed") == 1 and done.types.count("tool.result") == 1
    assert_contiguous(done)


async def test_a_hint_the_run_has_moved_past_is_claimed_as_usual(db: Database, settings: Settings) -> None:
    """The row took an event after the decision (its seq moved) but still waits to run: the hinted step matches
    nothing, and the runner claims the run as usual and takes the step, once."""
    exe, woken = await approved(db, settings)
    resume = await hint_of(exe, woken)
    async with db.transaction() as session:
        await append_any_event(session, exe, "agent.message", {"text": "meanwhile"})

    await run(db, settings, taken_over(exe, resume))
    done = await snapshot(db, exe)
    assert done.execution.status == "completed"
    assert [(f.path, f.content) for f in done.files] == [("a.md", "hello")]
    assert done.types[resume.seq :] == [
        "agent.message", "execution.resumed", "tool.result", "agent.message", "execution.completed",
    ]  # fmt: skip
    # Claimed by the usual claim, a statement of its own, not by the hinted step's beside a seq it had not seen.
    meanwhile, resumed, result, *_ = await created_at_after(db, exe, resume.seq)
    assert (meanwhile[0], resumed[0], result[0]) == ("agent.message", "execution.resumed", "tool.result")
    assert resumed[1] < result[1]
    assert done.execution.lease_epoch == resume.epoch + 1
    assert_contiguous(done)


async def test_a_model_agents_run_is_never_taken_over(db: Database, settings: Settings) -> None:
    """Only the offline agent's step can be told from the hint alone: another agent's state is not even sent."""
    entry = Entry(None, None, "with-verification", False, 0, None)
    assert claim_to_take_over("exe_x", Resume(1, 5, entry)) is None
    offline_without_call = Entry({"agent": "offline", "cursor": 0}, [], "with-verification", False, 0, None)
    assert claim_to_take_over("exe_x", Resume(1, 5, offline_without_call)) is None
    assert Resume.from_json("exe_x", {"epoch": 1}) is None
