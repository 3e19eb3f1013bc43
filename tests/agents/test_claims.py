"""agents.claims.claim_next: leases, fencing epochs, and exactly-once claiming under concurrency."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

import pytest
import sqlalchemy as sa

from agents.claims import Claim, LeaseLost, claim_execution, claim_next
from agents.runner import ExecutionRunner
from api.auth import Caller
from api.schemas import CreateTaskIn
from api.tasks import create_execution
from core.db import Database
from core.ids import new_id
from core.models import ApiKey, Checkpoint, Execution, ToolCall, utcnow
from core.run_entry import WAKE_UP_WINDOW
from core.settings import Settings
from core.vocabulary import Channel
from review import decide
from tests.conftest import make_account
from tests.support.waiting import until


async def new_executions(db: Database, settings: Settings, count: int) -> list[str]:
    account = await make_account(db, settings, f"{new_id('u')}@example.com")
    ids: list[str] = []
    task = CreateTaskIn.model_validate(
        {"taskName": "t", "taskDescription": "Write a note saying hi.", "testMode": "without-verification"}
    )
    for _ in range(count):
        # One transaction each, so created_at (the claim order) differs.
        async with db.transaction() as session:
            key_id = await session.scalar(sa.select(ApiKey.id).where(ApiKey.user_id == account.user_id))
            caller = Caller(account.user_id, account.email, str(key_id), frozenset({"eval:manage"}))
            ids.append((await create_execution(session, caller, task, "offline")).id)
    return ids


async def execution(db: Database, execution_id: str) -> Execution:
    async with db.reading() as session:
        return await session.get_one(Execution, execution_id)


async def set_fields(db: Database, execution_id: str, **values: Any) -> None:
    async with db.transaction() as session:
        await session.execute(sa.update(Execution).where(Execution.id == execution_id).values(**values))


async def test_a_search_passes_by_an_execution_created_after_its_clock_but_its_wake_up_claims_it(
    db: Database, settings: Settings
) -> None:
    """A search whose statement runs late (a loaded machine) must not start a run before it was created."""
    (exe,) = await new_executions(db, settings, 1)
    created = utcnow() + timedelta(minutes=1)  # as if committed after the search read its clock
    await set_fields(db, exe, created_at=created)
    assert await claim_next(db, "worker-a", 30) is None
    assert await claim_execution(db, "worker-a", 30, exe) == Claim(exe, 1)


async def test_queued_execution_is_claimed_once(db: Database, settings: Settings) -> None:
    (exe,) = await new_executions(db, settings, 1)
    before = utcnow()
    claim = await claim_next(db, "worker-a", 30)
    assert claim == Claim(exe, 1)
    row = await execution(db, exe)
    assert row.status == "running"
    assert row.worker_id == "worker-a"
    assert row.lease_epoch == 1
    assert row.lease_until is not None
    assert before + timedelta(seconds=29) < row.lease_until <= utcnow() + timedelta(seconds=30)
    assert row.started_at is not None and row.started_at >= before - timedelta(seconds=1)
    # The lease is live: nobody else gets it, not even the same worker.
    assert await claim_next(db, "worker-b", 30) is None
    assert await claim_next(db, "worker-a", 30) is None
    assert (await execution(db, exe)).worker_id == "worker-a"


async def test_nothing_to_claim(db: Database) -> None:
    assert await claim_next(db, "worker-a", 30) is None


async def test_expired_lease_is_claimable_again_with_a_new_epoch(db: Database, settings: Settings) -> None:
    (exe,) = await new_executions(db, settings, 1)
    first = await claim_next(db, "worker-a", 30)
    assert first is not None
    started_at = (await execution(db, exe)).started_at
    await set_fields(db, exe, lease_until=utcnow() - timedelta(seconds=1))
    second = await claim_next(db, "worker-b", 30)
    assert second == Claim(exe, first.epoch + 1)
    row = await execution(db, exe)
    assert (row.worker_id, row.lease_epoch, row.status) == ("worker-b", 2, "running")
    assert row.started_at == started_at, "a re-claim keeps the first start time"
    assert await claim_next(db, "worker-a", 30) is None


async def test_running_without_a_lease_is_claimable(db: Database, settings: Settings) -> None:
    """What review.decide leaves after an approval: running, worker and lease cleared."""
    (exe,) = await new_executions(db, settings, 1)
    await set_fields(db, exe, status="running", worker_id=None, lease_until=None, lease_epoch=4)
    assert await claim_next(db, "worker-a", 30) == Claim(exe, 5)


STOPPED = ("awaiting_review", "completed", "failed", "rejected", "cancelled")


async def test_paused_or_finished_executions_are_never_claimed(db: Database, settings: Settings) -> None:
    ids = await new_executions(db, settings, len(STOPPED))
    for exe, status in zip(ids, STOPPED, strict=True):
        await set_fields(db, exe, status=status, worker_id=None, lease_until=None)
    assert await claim_next(db, "worker-a", 30) is None
    for exe in ids:
        await set_fields(db, exe, lease_until=utcnow() - timedelta(minutes=5))
    assert await claim_next(db, "worker-a", 30) is None
    for exe, status in zip(ids, STOPPED, strict=True):
        row = await execution(db, exe)
        assert (row.status, row.lease_epoch, row.worker_id) == (status, 0, None)


async def test_oldest_runnable_first(db: Database, settings: Settings) -> None:
    first, second, third = await new_executions(db, settings, 3)
    await set_fields(db, first, status="awaiting_review")
    claims = [await claim_next(db, "w", 30) for _ in range(3)]
    assert [c.execution_id if c else None for c in claims] == [second, third, None]


async def test_concurrent_claims_take_each_execution_exactly_once(db: Database, settings: Settings) -> None:
    ids = await new_executions(db, settings, 5)
    claims = await asyncio.gather(*(claim_next(db, f"worker-{n}", 30) for n in range(20)))
    won = [c for c in claims if c is not None]
    assert sorted(c.execution_id for c in won) == sorted(ids)
    assert all(c.epoch == 1 for c in won)
    for claim, worker in ((c, f"worker-{n}") for n, c in enumerate(claims) if c is not None):
        row = await execution(db, claim.execution_id)
        assert (row.worker_id, row.lease_epoch) == (worker, 1)
    assert await claim_next(db, "late", 30) is None


async def test_a_stale_claim_of_the_same_worker_is_fenced_out_by_its_epoch(db: Database, settings: Settings) -> None:
    """A worker that comes back under the same id (a restart, a reused host name) after its lease ran out and
    claims again: the writes of its old claim must not pass as the new one's; only the epoch tells them apart."""
    (exe,) = await new_executions(db, settings, 1)
    first = await claim_next(db, "worker-a", 30)
    assert first is not None
    await set_fields(db, exe, lease_until=utcnow() - timedelta(seconds=1))
    second = await claim_next(db, "worker-a", 30)
    assert second == Claim(exe, first.epoch + 1)
    with pytest.raises(LeaseLost):
        async with db.transaction() as session:
            await ExecutionRunner(settings, db, "worker-a", first).fence(session)
    async with db.transaction() as session:
        await ExecutionRunner(settings, db, "worker-a", second).fence(session)


async def test_a_claim_hands_back_what_the_run_goes_on_from(db: Database, settings: Settings) -> None:
    """The agent's state as stored (JSON decoded as SQLAlchemy would), the run's mode and how many of the caller's
    checkpoints wait to be passed: the runner's re-entry reads nothing more (issue 25)."""
    account = await make_account(db, settings, f"{new_id('u')}@example.com")
    stage = {"stage": "Write", "description": "the note", "verificationQuestion": "Write it?"}
    task = CreateTaskIn.model_validate(
        {
            "taskName": "t",
            "taskDescription": 'Write a note called "a.md" saying "hi".',
            "testMode": "with-verification",
            "assignedReviewer": account.email,
            "autoDetectCheckpoints": True,
            "checkpoints": [stage, {**stage, "stage": "Check"}],
        }
    )
    async with db.transaction() as session:
        key_id = await session.scalar(sa.select(ApiKey.id).where(ApiKey.user_id == account.user_id))
        caller = Caller(account.user_id, account.email, str(key_id), frozenset({"eval:manage"}))
        exe = (await create_execution(session, caller, task, "offline")).id
    first = await claim_next(db, "worker-a", 30)
    assert first is not None and first.entry is not None
    assert (first.entry.state, first.entry.test_mode) == (None, "with-verification")
    assert (first.entry.auto_detect_checkpoints, first.entry.caller_pending) == (True, 2)
    state, plan = {"agent": "offline", "cursor": 1}, [{"tool": "write_file", "args": {"path": "é.md"}}]
    await set_fields(db, exe, agent_state=state, agent_plan=plan, lease_until=utcnow() - timedelta(seconds=1))
    async with db.transaction() as session:
        await session.execute(
            sa.update(Checkpoint)
            .where(Checkpoint.execution_id == exe, Checkpoint.position == 0)
            .values(status="approved")
        )
    second = await claim_next(db, "worker-b", 30)
    assert second == Claim(exe, 2) and second.entry is not None
    assert (second.entry.state, second.entry.plan, second.entry.caller_pending) == (state, plan, 1)


async def paused_at_its_checkpoint(db: Database, settings: Settings) -> tuple[str, Checkpoint, ToolCall, str]:
    """An offline run paused at a checkpoint before its one step: the execution, the checkpoint, the call it holds
    back and the reviewer."""
    account = await make_account(db, settings, f"{new_id('u')}@example.com")
    task = CreateTaskIn.model_validate(
        {
            "taskName": "t",
            "taskDescription": 'Write a note called "a.md" saying "hi".',
            "testMode": "with-verification",
            "assignedReviewer": account.email,
            "checkpoints": [{"stage": "Write", "description": "the note", "verificationQuestion": "Write it?"}],
        }
    )
    async with db.transaction() as session:
        key_id = await session.scalar(sa.select(ApiKey.id).where(ApiKey.user_id == account.user_id))
        caller = Caller(account.user_id, account.email, str(key_id), frozenset({"eval:manage"}))
        exe = (await create_execution(session, caller, task, "offline")).id
    first = await claim_next(db, "worker-a", 30)
    assert first is not None and first.entry is not None and first.entry.step_call is None  # no state yet
    await ExecutionRunner(settings, db, "worker-a", first).run()
    async with db.reading() as session:
        (checkpoint,) = await session.scalars(sa.select(Checkpoint).where(Checkpoint.execution_id == exe))
        (held,) = await session.scalars(sa.select(ToolCall).where(ToolCall.execution_id == exe))
    assert checkpoint.status == "awaiting_review" and checkpoint.tool_call_id == held.id
    return exe, checkpoint, held, account.email


async def test_a_run_an_approval_let_go_on_is_kept_for_its_wake_up(db: Database, settings: Settings) -> None:
    """A worker's periodic search that fell between an approval's commit and its wake-up took the run without the
    wake-up's hint, the slow way (issue 25: one approval in fifty on the bench, three times as slow). For a moment
    (WAKE_UP_WINDOW) a search passes the run by, while a claim naming it, as a wake-up's, takes it at once."""
    exe, checkpoint, _held, reviewer = await paused_at_its_checkpoint(db, settings)
    async with db.transaction() as session:
        await decide(session, checkpoint.id, "approve", by=reviewer, via=Channel.API)
    assert await claim_next(db, "searching", 30) is None
    woken = await claim_execution(db, "woken", 30, exe)
    assert woken is not None and woken.execution_id == exe
    row = await execution(db, exe)
    assert (row.status, row.worker_id, row.lease_epoch) == ("running", "woken", woken.epoch)
    # The lease is the claim's now: nobody else takes the run, by id or by searching.
    assert await claim_execution(db, "late", 30, exe) is None
    assert await claim_next(db, "late", 30) is None


async def test_a_run_whose_wake_up_was_lost_is_found_once_its_window_is_over(db: Database, settings: Settings) -> None:
    exe, checkpoint, _held, reviewer = await paused_at_its_checkpoint(db, settings)
    async with db.transaction() as session:
        decided = await decide(session, checkpoint.id, "approve", by=reviewer, via=Channel.API)
    assert await claim_next(db, "searching", 30) is None
    found = await until(lambda: claim_next(db, "searching", 30), timeout=WAKE_UP_WINDOW.total_seconds() + 10)
    assert found.execution_id == exe
    assert utcnow() >= decided.at + WAKE_UP_WINDOW


@pytest.mark.parametrize("edited", [False, True])
async def test_after_an_approval_the_claim_hands_back_the_call_it_let_through(
    db: Database, settings: Settings, edited: bool
) -> None:
    """As its row holds it, so that the step after an approval reads nothing first (issue 25); not when the approval
    edited its arguments: the runner reads the edits with the call (agents/tool_calls.py `take_edits`)."""
    exe, checkpoint, held, reviewer = await paused_at_its_checkpoint(db, settings)
    async with db.transaction() as session:
        edits = {"content": "edited"} if edited else None
        await decide(session, checkpoint.id, "approve", by=reviewer, via=Channel.WEB, edited_args=edits)
    second = await claim_execution(db, "worker-b", 30, exe)
    assert second is not None and second.entry is not None
    if edited:
        assert second.entry.step_call is None
        return
    assert second.entry.step_call is not None and second.entry.step_call.cursor == 0
    found = second.entry.step_call.call
    assert found is not None
    columns = ("id", "execution_id", "step_index", "tool", "args", "provider_call_id", "proposed_args", "status")
    assert [getattr(found, name) for name in columns] == [getattr(held, name) for name in columns]
    assert (found.status, found.started_at) == ("proposed", held.started_at)
