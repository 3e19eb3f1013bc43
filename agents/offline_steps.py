"""The offline agent's steps: its plan, carried out one tool call at a time through the runner."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncSession

from agents import budgets, call_edits, offline, tool_calls
from agents.claims import NotTakenOver
from agents.gates import pending_caller_positions, unknown_outcome_gate, unreviewed
from agents.policy import RunMode, describe_call, side_effect_of
from agents.tool_base import InPlaceStep
from agents.tool_calls import Ending
from agents.tools import TOOLS
from core.errors import ExecutionFailed, FailureCode
from core.event_payloads import AgentMessage, TypedEvent
from core.events import append_event
from core.models import TOOL_CALLS, Checkpoint, ToolCall
from core.run_entry import OpenCall, StepCall
from core.vocabulary import EventType

if TYPE_CHECKING:
    # A circle for the type checker only: the runner (which imports this module) hands itself to these steps.
    from agents.runner import ExecutionRunner

FINISH_ACTION = {"tool": "finish", "args": {}, "instruction": "finish the task"}

# Built once, as every statement of a step: the calls that succeeded before a step, in order.
_SUCCEEDED_CALLS = (
    sa.select(TOOL_CALLS.c.tool, TOOL_CALLS.c.result)
    .where(
        TOOL_CALLS.c.execution_id == sa.bindparam("execution_id"),
        TOOL_CALLS.c.step_index < sa.bindparam("before"),
        TOOL_CALLS.c.status == "succeeded",
    )
    .order_by(TOOL_CALLS.c.step_index)
)


class OfflineDriver:
    def __init__(
        self,
        runner: ExecutionRunner,
        mode: RunMode,
        plan: offline.Steps,
        caller_pending: int | None = None,
        step_call: StepCall | None = None,
    ) -> None:
        """`plan`: the run's (`offline.plan_of`); `caller_pending`: how many of the caller's checkpoints wait to be
        passed, when the claim counted them;
        `step_call`: the call of the step the run goes on with, when the claim found it (`agents.claims.Entry`)."""
        self.runner = runner
        self.mode = mode
        self.plan = plan
        self.execution_id = runner.execution_id
        # The caller's checkpoints not passed yet: (id, position), in position order; read at the first turn
        # unless the claim counted none.
        self._caller_pending: list[tuple[str, int]] | None = [] if caller_pending == 0 else None
        self._began_here = False
        self._step_call = step_call

    async def advance(self, state: dict[str, Any]) -> bool:
        """Take the next step; False once the execution paused or ended."""
        runner = self.runner
        cursor: int = state["cursor"]
        plan = self.plan
        failed = state.get("failedStep")
        if failed is not None:
            # The plan's later steps may depend on this one, and the agent cannot change its plan: it stops.
            raise ExecutionFailed(
                FailureCode.TOOL_FAILED,
                f"Step {failed['step']} ({failed['instruction']}) failed: {failed['error']}",
                step=failed["step"],
                tool=failed["tool"],
            )
        # What the claim found holds for its first turn only: a turn may open the step's call, or run it.
        claimed, self._step_call = self._step_call, None
        backend = runner.db.backend
        if backend.writes_alone:
            alone = await self._advance_alone(state, cursor, claimed)
            if alone is not None:
                return alone
        elif runner.claim.resume is not None:
            # The step that takes the claim over, as the one write of its transaction (SQLite writes no other way).
            async with runner.db.transaction() as session:
                await backend.begin_writing(session)
                taken = await self._advance_alone(state, cursor, claimed, session)
            if taken is not None:
                return taken
        if runner.claim.resume is not None:
            raise NotTakenOver(self.execution_id)  # only a step of one statement takes a claim over
        async with runner.db.transaction() as session:
            due = await self._due_checkpoint(session, state["gates"], cursor, len(plan))
            if due is not None:
                await runner.fence(session)
                action = self._action(plan[cursor]) if cursor < len(plan) else FINISH_ACTION
                gates: list[int] = state["gates"]
                bound = gates[due.position] if due.origin == "caller" and due.position < len(gates) else cursor
                if bound == cursor < len(plan) and not self.mode.without_verification:
                    # The checkpoint holds back this step's call: its intent goes on record now, bound to the
                    # checkpoint, so the reviewer sees that exact call and may approve it with edited arguments.
                    held = await self._open(session, cursor, plan[cursor], claimed)
                    due.tool_call_id = held.id
                    action = self._action(plan[cursor], held)
                passed = await runner.pass_or_pause(session, due, action, self.mode, offline.guards(plan, bound))
                if passed and self._caller_pending:
                    self._caller_pending = [p for p in self._caller_pending if p[0] != due.id]
                return passed
            if cursor >= len(plan):
                # Fenced by its own statement.
                await runner.complete(session, await self._result(session, state, len(plan)))
                return False
            step = plan[cursor]
            # Only the first step of a claim can find its call begun by a worker that died.
            call = None
            if not self._began_here:
                call = await self._begun_call(session, cursor, claimed)
            if call is None and not self._needs_review(step) and not TOOLS[step["tool"]].performs_outside:
                return await self._common_step(session, state, cursor, step)
            if call is not None and call.status == "proposed" and self._in_place(call):
                # The call its checkpoint let through, needing no gate and working only in our database: recorded
                # by the step's one statement, which the claim fences (and, the last step, ends the run with it).
                # Nothing else is written before it: the fence of its own, below, would only cost a round trip.
                return await self._begun_step(session, state, cursor, call)
            await runner.fence(session)
            fresh = call is None
            if call is None:
                call = await self._open(session, cursor, step)
            # The edits an approval made are taken as the call is loaded (agents/call_edits.py `call_of_step`); a
            # call opened just now has no approval yet.
            gate = await tool_calls.gate(runner, session, call, self.mode)
            if gate is not None:
                # The offline agent cannot rewrite a step: after a rejection it asks again (the next attempt).
                await runner.pause(session, gate, self._action(step, call), offline.guards(plan, cursor))
                return False
            if not fresh and call.status == "started" and not TOOLS[call.tool].repeatable(call.args):
                unknown = await unknown_outcome_gate(
                    session, self.execution_id, call.id, describe_call(call.tool, call.args)
                )
                if unknown.status == "pending":
                    # Passed without review, this same call runs at the next turn: it must be found again.
                    return await runner.pass_or_pause(
                        session, unknown, self._action(step, call), self.mode, offline.guards(plan, cursor)
                    )
            self._began_here = True  # from here on this claim makes every call it meets
            if not TOOLS[call.tool].performs_outside:
                # Nothing done outside the database: the call runs and is recorded in this transaction.
                return await self._begun_step(session, state, cursor, call)
            await tool_calls.start_call(session, call)

        await tool_calls.run_call(runner, state, call, self._advanced(state, cursor))
        return True

    async def _advance_alone(
        self,
        state: dict[str, Any],
        cursor: int,
        claimed: StepCall | None,
        session: AsyncSession | None = None,
    ) -> bool | None:
        """The turn as one statement, committing by itself outside any session (or the one write of `session`), when
        it is the common step (or the step its checkpoint just let through) and the driver knows that without
        reading anything; None, having done nothing, when the turn needs more. As `advance` otherwise."""
        if cursor >= len(self.plan) or self._due_without_reading(state["gates"], cursor) is not False:
            return None
        step = self.plan[cursor]
        if self._needs_review(step) or not tool_calls.alone_in_place(step["tool"], step["args"]):
            return None
        if self._began_here:
            return await self._common_step(session, state, cursor, step)
        call = claimed.call if claimed is not None and claimed.cursor == cursor else None
        if call is None or call.status != "proposed" or not self._in_place(call):
            return None
        if not tool_calls.alone_in_place(call.tool, call.args):
            return None
        return await self._begun_step(session, state, cursor, call)

    async def _common_step(
        self, session: AsyncSession | None, state: dict[str, Any], cursor: int, step: dict[str, Any]
    ) -> bool:
        """The common step: one statement, fenced by the claim, that also saves the progress (in `session`, or
        committing by itself)."""
        self._began_here = True
        said: AgentMessage = {"text": offline.step_message(step)}
        message: TypedEvent = (EventType.AGENT_MESSAGE, said)
        step_of = InPlaceStep(cursor, step["tool"], step["args"], before=(message,))
        await tool_calls.run_in_place(self.runner, session, state, step_of, self._advanced(state, cursor))
        return True

    async def _begun_step(
        self, session: AsyncSession | None, state: dict[str, Any], cursor: int, call: ToolCall | OpenCall
    ) -> bool:
        """The step of `call`, on record and let through, working only in our database: its record (and, the last
        step, the run's end) in `session`, or committing by itself. False once the run ended."""
        self._began_here = True
        return not await tool_calls.run_begun_in_place(
            self.runner, session, state, call, self._advanced(state, cursor), self._ending(session, state, call)
        )

    def _due_without_reading(self, gates: list[int], cursor: int) -> bool | None:
        """Whether a caller's checkpoint is due before the step at `cursor` (not the end), as `_due_checkpoint`
        finds it; None when that takes a read."""
        if self._caller_pending is None:
            if gates:
                return None
            self._caller_pending = []
        return any(at < len(gates) and gates[at] <= cursor for _, at in self._caller_pending)

    async def _begun_call(self, session: AsyncSession, cursor: int, claimed: StepCall | None = None) -> ToolCall | None:
        """The step's call if one was opened (at its checkpoint, or by a worker that died), with the edits of its
        approval taken: as `claimed` (what the claim found at this turn's step) has it, else read."""
        if claimed is not None and claimed.cursor == cursor:
            return None if claimed.call is None else claimed.call.as_orm()
        return await call_edits.call_of_step(session, self.execution_id, cursor)

    def _in_place(self, call: ToolCall | OpenCall) -> bool:
        """Whether `call` needs no gate and works only in our database: nothing to write before its record."""
        return not TOOLS[call.tool].performs_outside and tool_calls.ungated(call, self.mode)

    def _ending(
        self, session: AsyncSession | None, state: dict[str, Any], call: ToolCall | OpenCall
    ) -> tool_calls.EndingOf:
        """The run's end, written with the step of `call` when that is the plan's last and nothing stands in the
        way: not a failed step, not a budget used up, not a checkpoint still to pass (the statement itself looks
        for that one). The next turn would otherwise meet the end in a transaction of its own (issue 25: the step
        after an approval is the last one of many runs). Without `session`, the end written alone (`runner.ending`)."""

        async def ending(result: dict[str, Any]) -> Ending | None:
            if state["cursor"] < len(self.plan) or state.get("failedStep") is not None:
                return None
            if not budgets.within(state, self.runner.settings):
                return None
            done = await self._result(session, state, call.step_index, (call.tool, result))
            return self.runner.ending(done, alone=session is None)

        return ending

    async def _open(
        self, session: AsyncSession, cursor: int, step: dict[str, Any], claimed: StepCall | None = None
    ) -> ToolCall:
        """The step's call, its intent on record (made once: a call opened at its checkpoint is found again)."""
        found = await self._begun_call(session, cursor, claimed)
        if found is not None:
            return found
        await append_event(session, self.execution_id, EventType.AGENT_MESSAGE, {"text": offline.step_message(step)})
        return await tool_calls.open_call(self.runner, session, cursor, step["tool"], step["args"])

    def _advanced(self, state: dict[str, Any], cursor: int) -> Callable[[dict[str, Any]], None]:
        def advanced(answer: dict[str, Any]) -> None:
            state["cursor"] = cursor + 1
            budgets.spend(state, steps=1)
            if "error" in answer:
                step = self.plan[cursor]
                failed = {"step": cursor + 1, "tool": step["tool"], "instruction": step["instruction"]}
                state["failedStep"] = {**failed, "error": str(answer["error"])}

        return advanced

    def _needs_review(self, step: dict[str, Any]) -> bool:
        tool = TOOLS[step["tool"]]
        return self.mode.gate_actions and tool.acts_on_world and side_effect_of(step["tool"], step["args"]) is not None

    def _action(self, step: dict[str, Any], call: ToolCall | None = None) -> dict[str, Any]:
        action = {"tool": step["tool"], "args": step["args"], "instruction": step["instruction"]}
        if call is not None:
            action["toolCallId"] = call.id
        return action

    async def _due_checkpoint(
        self, session: AsyncSession, gates: list[int], cursor: int, plan_length: int
    ) -> Checkpoint | None:
        """The caller's checkpoint placed before this step; at the end, any checkpoint not passed yet."""
        if cursor >= plan_length:
            return await unreviewed(session, self.execution_id)
        # Read once a claim: while the execution runs, only this driver passes caller checkpoints. A plan with
        # no step gated by the caller's checkpoints has none due: nothing to read.
        if self._caller_pending is None:
            self._caller_pending = await pending_caller_positions(session, self.execution_id) if gates else []
        # Checkpoints are bound to steps by what they name (agents/offline_plan.py), so a later position may
        # guard an earlier step: the due one is any whose step has come, the first by position.
        due = next((cp for cp, at in self._caller_pending if at < len(gates) and gates[at] <= cursor), None)
        return None if due is None else await session.get_one(Checkpoint, due)

    async def _result(
        self,
        session: AsyncSession | None,
        state: dict[str, Any],
        before: int,
        last: tuple[str, dict[str, Any]] | None = None,
    ) -> dict[str, Any]:
        """The run's result from the calls that succeeded at the steps before `before`, then `last` (the step
        recorded with the end): read only when there are such steps; without `session`, in one of its own (the
        claim, which the end's statement fences, keeps those calls as they are)."""
        done: list[tuple[str, dict[str, Any]]] = []
        if before > 0:
            parameters = {"execution_id": self.execution_id, "before": before}
            if session is None:
                async with self.runner.db.reading() as reading:
                    calls = (await reading.execute(_SUCCEEDED_CALLS, parameters)).all()
            else:
                calls = (await session.execute(_SUCCEEDED_CALLS, parameters)).all()
            done = [(tool, result or {}) for tool, result in calls]
        return offline.final_result(state, done if last is None else [*done, last])
