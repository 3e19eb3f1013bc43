"""The offline agent's plan is written once, in a column of its own (`executions.agent_plan`), and never again by
the steps, which save only their progress (`agent_state`); a run planned before that column, its plan inside its
state, goes on as it was planned."""

from __future__ import annotations

import asyncio

import sqlalchemy as sa

from agents import offline
from agents.runner import ExecutionRunner
from core.db import Database
from core.models import Execution
from core.settings import Settings
from core.vocabulary import Channel
from review import decide
from tests.agents.test_runner import (
    BEFORE_SENDING,
    NOTE_THEN_MAIL,
    REVIEWER,
    assert_contiguous,
    claim,
    claim_and_run,
    new_execution,
    snapshot,
)

PLANNED = [
    {"tool": "write_file", "args": {"path": "draft.md", "content": "draft"}},
    {"tool": "send_email", "args": {"to": "boss@example.com", "subject": "Report", "body": "See the draft"}},
]


def tools_and_args(plan: list[dict[str, object]] | None) -> list[dict[str, object]]:
    return [{"tool": step["tool"], "args": step["args"]} for step in plan or []]


async def test_the_steps_save_their_progress_and_not_the_plan(db: Database, settings: Settings) -> None:
    exe = await new_execution(db, settings, NOTE_THEN_MAIL, checkpoints=[BEFORE_SENDING], test_mode="with-verification")
    await claim_and_run(db, settings)
    paused = await snapshot(db, exe)
    assert paused.execution.status == "awaiting_review"
    state = paused.execution.agent_state
    assert state is not None and state["cursor"] == 1 and "plan" not in state
    assert tools_and_args(paused.execution.agent_plan) == PLANNED

    async with db.transaction() as session:
        await decide(session, paused.checkpoints[0].id, "approve", by=REVIEWER, via=Channel.WEB)
    await claim_and_run(db, settings, "worker-2")
    done = await snapshot(db, exe)
    assert done.execution.status == "completed"
    assert [(c.tool, c.args) for c in done.calls] == [(s["tool"], s["args"]) for s in PLANNED]
    assert done.execution.agent_state is not None and "plan" not in done.execution.agent_state
    assert done.execution.agent_plan == paused.execution.agent_plan
    assert_contiguous(done)


async def test_a_run_planned_before_keeps_its_plan_inside_its_state(db: Database, settings: Settings) -> None:
    """As a worker of the version before wrote it: the plan in `agent_state`, none in `agent_plan`. The run follows
    that plan, and its steps save it with their progress, as they always did."""
    exe = await new_execution(db, settings, NOTE_THEN_MAIL)
    state, plan = offline.initial_state(NOTE_THEN_MAIL, [])
    # The mail as that version planned it: to a recipient this one would not have written.
    old_plan = [plan[0], {**plan[1], "args": {**plan[1]["args"], "to": "old@example.com"}}]
    async with db.transaction() as session:
        await session.execute(
            sa.update(Execution).where(Execution.id == exe).values(agent_state={**state, "plan": old_plan})
        )
    got = await claim(db)
    assert got.entry is not None and got.entry.plan is None
    await asyncio.wait_for(ExecutionRunner(settings, db, "worker-1", got).run(), 20)
    done = await snapshot(db, exe)
    assert done.execution.status == "completed"
    assert [m.recipient for m in done.mails] == ["old@example.com"]
    assert done.execution.agent_plan is None
    assert done.execution.agent_state is not None and done.execution.agent_state["plan"] == old_plan
    assert done.execution.agent_state["cursor"] == 2
    assert_contiguous(done)
