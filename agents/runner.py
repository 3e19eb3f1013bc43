"""Running one claimed execution: step by step, each step a committed transaction.

Every transaction starts by renewing the lease *and* checking the claim's epoch
(fencing): a worker that lost its lease, or an execution cancelled under it, stops at
its next step instead of writing over someone else's progress.
"""

from __future__ import annotations

import asyncio
import logging
from datetime import timedelta
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncSession

from agents import offline
from agents.claims import Claim
from agents.tools import TOOLS, ToolContext
from core.db import Database
from core.events import append_event
from core.ids import new_id
from core.models import Checkpoint, Decision, Execution, ToolCall, utcnow
from core.settings import Settings
from review import decide
from review.notify import checkpoint_awaiting
from review.timers import schedule_timers

log = logging.getLogger(__name__)


class LeaseLost(Exception):
    """Another worker holds this execution now, or it left the running state."""


class AgentUnavailable(Exception):
    """The execution asks for an agent model this service cannot run."""


class ExecutionRunner:
    def __init__(self, settings: Settings, db: Database, worker_id: str, claim: Claim) -> None:
        self.settings = settings
        self.db = db
        self.worker_id = worker_id
        self.claim = claim
        self.execution_id = claim.execution_id

    async def run(self) -> None:
        # The agent runs in a task of its own so that the lease renewer can stop exactly it;
        # asyncio.wait tells the agent's cancellation apart from our own.
        agent = asyncio.create_task(self._drive_or_fail())
        renewer = asyncio.create_task(self._renew_lease(agent))
        try:
            await asyncio.wait({agent})
        except asyncio.CancelledError:
            agent.cancel()
            await asyncio.wait({agent})
            raise
        finally:
            renewer.cancel()
            await asyncio.wait({renewer})

    async def _drive_or_fail(self) -> None:
        try:
            await self._drive()
        except LeaseLost:
            log.info("execution %s: lease lost, leaving it", self.execution_id)
        except Exception as exc:
            log.exception("execution %s failed", self.execution_id)
            await self._fail(exc)

    async def _fence(self, session: AsyncSession) -> None:
        renewed = await session.execute(
            sa.update(Execution)
            .where(
                Execution.id == self.execution_id,
                Execution.worker_id == self.worker_id,
                Execution.lease_epoch == self.claim.epoch,
                Execution.status == "running",
            )
            .values(lease_until=utcnow() + timedelta(seconds=self.settings.worker_lease_seconds)),
            execution_options={"synchronize_session": False},
        )
        if renewed.rowcount != 1:  # type: ignore[attr-defined]
            raise LeaseLost(self.execution_id)

    async def _renew_lease(self, agent: asyncio.Task[None]) -> None:
        while not agent.done():
            await asyncio.sleep(self.settings.worker_lease_seconds / 3)
            try:
                async with self.db.transaction() as session:
                    await self._fence(session)
            except LeaseLost:
                # Paused, finished, cancelled or taken over: a still-running agent must stop writing.
                agent.cancel()
                return
            except Exception:
                log.warning("execution %s: lease renewal failed; retrying", self.execution_id, exc_info=True)

    async def _drive(self) -> None:
        async with self.db.transaction() as session:
            await self._fence(session)
            execution = await session.get_one(Execution, self.execution_id)
            if execution.agent_state is None:
                if execution.agent_model != offline.MODEL_NAME:
                    raise AgentUnavailable(
                        f"agent model {execution.agent_model!r} is not available; this service runs 'offline'"
                    )
                checkpoints = await self._checkpoints(session)
                state = offline.initial_state(execution.task_description, checkpoints)
                execution.agent_state = state
                await append_event(session, self.execution_id, "execution.started", {"worker": self.worker_id})
                await append_event(session, self.execution_id, "agent.message", {"text": offline.plan_message(state)})
            else:
                state = dict(execution.agent_state)
                await append_event(session, self.execution_id, "execution.resumed", {"worker": self.worker_id})
                await self._take_rejections(session, execution, state)
            without_verification = execution.test_mode == "without-verification"
        while await self._advance(state, without_verification):
            pass

    async def _take_rejections(self, session: AsyncSession, execution: Execution, state: dict[str, Any]) -> None:
        """Hand every rejection the agent has not seen yet to it, comment verbatim (review.decide sent us back)."""
        rejected = await session.execute(
            sa.select(Decision.checkpoint_id, Decision.attempt, Decision.comment)
            .where(Decision.execution_id == self.execution_id, Decision.decision == "reject")
            .order_by(Decision.decided_at)
        )
        for checkpoint_id, attempt, comment in rejected.all():
            if not offline.revised(state, checkpoint_id, attempt):
                text = offline.revise(state, checkpoint_id, attempt, comment)
                await append_event(
                    session,
                    self.execution_id,
                    "agent.message",
                    {"text": text, "revision": {"checkpointId": checkpoint_id, "attempt": attempt, "comment": comment}},
                )
        execution.agent_state = dict(state)

    async def _checkpoints(self, session: AsyncSession) -> list[Checkpoint]:
        rows = await session.scalars(
            sa.select(Checkpoint).where(Checkpoint.execution_id == self.execution_id).order_by(Checkpoint.position)
        )
        return list(rows)

    async def _advance(self, state: dict[str, Any], without_verification: bool) -> bool:
        """Take the next step; False once the execution paused or ended."""
        cursor: int = state["cursor"]
        plan: list[dict[str, Any]] = state["plan"]
        async with self.db.transaction() as session:
            await self._fence(session)
            gate = await self._due_checkpoint(session, state["gates"], cursor)
            if gate is not None:
                if without_verification:
                    await decide(session, gate.id, "approve", by="vouch", via="auto")
                    return True
                await self._pause(session, gate, plan[cursor] if cursor < len(plan) else None)
                return False
            if cursor >= len(plan):
                await self._finish(session, state)
                return False
            step = plan[cursor]
            call = await session.scalar(
                sa.select(ToolCall).where(ToolCall.execution_id == self.execution_id, ToolCall.step_index == cursor)
            )
            if call is None:
                call = ToolCall(
                    id=new_id("call"),
                    execution_id=self.execution_id,
                    step_index=cursor,
                    tool=step["tool"],
                    args=step["args"],
                    status="started",
                    started_at=utcnow(),
                )
                session.add(call)
                await append_event(session, self.execution_id, "agent.message", {"text": offline.step_message(step)})
                await append_event(
                    session,
                    self.execution_id,
                    "tool.call",
                    {
                        "toolCallId": call.id,
                        "tool": call.tool,
                        "args": call.args,
                        "actsOnWorld": TOOLS[call.tool].acts_on_world,
                    },
                )
        tool = TOOLS[step["tool"]]
        outcome = await tool.perform(step["args"], call.started_at)
        async with self.db.transaction() as session:
            await self._fence(session)
            ctx = ToolContext(session, self.settings, self.execution_id, call.id, call.started_at)
            result = await tool.record(ctx, step["args"], outcome)
            finished = utcnow()
            duration_ms = round((finished - call.started_at).total_seconds() * 1000, 3)
            await session.execute(
                sa.update(ToolCall)
                .where(ToolCall.id == call.id)
                .values(status="succeeded", result=result, finished_at=finished)
            )
            state["cursor"] = cursor + 1
            await session.execute(
                sa.update(Execution).where(Execution.id == self.execution_id).values(agent_state=dict(state))
            )
            await append_event(
                session,
                self.execution_id,
                "tool.result",
                {"toolCallId": call.id, "tool": call.tool, "result": result, "durationMs": duration_ms},
            )
        return True

    async def _due_checkpoint(self, session: AsyncSession, gates: list[int], cursor: int) -> Checkpoint | None:
        pending = await session.scalar(
            sa.select(Checkpoint)
            .where(Checkpoint.execution_id == self.execution_id, Checkpoint.status == "pending")
            .order_by(Checkpoint.position)
            .limit(1)
        )
        if pending is None or pending.position >= len(gates) or gates[pending.position] > cursor:
            return None
        return pending

    async def _pause(self, session: AsyncSession, checkpoint: Checkpoint, next_step: dict[str, Any] | None) -> None:
        now = utcnow()
        checkpoint.status, checkpoint.awaiting_since = "awaiting_review", now
        # Let go of the execution entirely: the pause is these rows, not a waiting coroutine.
        await session.execute(
            sa.update(Execution)
            .where(Execution.id == self.execution_id)
            .values(status="awaiting_review", worker_id=None, lease_until=None)
        )
        await append_event(
            session,
            self.execution_id,
            "checkpoint.awaiting_review",
            {
                "checkpointId": checkpoint.id,
                "position": checkpoint.position,
                "stage": checkpoint.stage,
                "description": checkpoint.description,
                "verificationQuestion": checkpoint.verification_question,
                "origin": checkpoint.origin,
                "attempt": checkpoint.attempt,
                "nextAction": (
                    {
                        "tool": next_step["tool"],
                        "args": next_step["args"],
                        "instruction": next_step["instruction"],
                    }
                    if next_step is not None
                    else {"tool": "finish", "args": {}, "instruction": "finish the task"}
                ),
            },
        )
        # Reminder, escalation and deadline rows in the pause's own transaction: no pause without its timers.
        await schedule_timers(session, self.settings, self.execution_id, checkpoint, now)
        # The review mail (links + reply token), queued in this same transaction: exactly once per attempt.
        await checkpoint_awaiting(session, self.settings, self.execution_id, checkpoint, next_step)

    async def _finish(self, session: AsyncSession, state: dict[str, Any]) -> None:
        calls = await session.scalars(
            sa.select(ToolCall)
            .where(ToolCall.execution_id == self.execution_id, ToolCall.status == "succeeded")
            .order_by(ToolCall.step_index)
        )
        result = offline.final_result(state, [(c.tool, c.result or {}) for c in calls])
        now = utcnow()
        await session.execute(
            sa.update(Execution)
            .where(Execution.id == self.execution_id)
            .values(status="completed", completed_at=now, result=result, worker_id=None, lease_until=None)
        )
        await append_event(session, self.execution_id, "agent.message", {"text": result["summary"]})
        await append_event(session, self.execution_id, "execution.completed", {"status": "completed", "result": result})

    async def _fail(self, exc: Exception) -> None:
        message = str(exc) if isinstance(exc, AgentUnavailable) else f"{type(exc).__name__}: {exc}"
        try:
            async with self.db.transaction() as session:
                await self._fence(session)
                await session.execute(
                    sa.update(Execution)
                    .where(Execution.id == self.execution_id)
                    .values(
                        status="failed",
                        completed_at=utcnow(),
                        error=message,
                        worker_id=None,
                        lease_until=None,
                    )
                )
                await append_event(
                    session, self.execution_id, "execution.failed", {"status": "failed", "error": message}
                )
        except LeaseLost:
            pass
