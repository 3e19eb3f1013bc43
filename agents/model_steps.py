"""A language model's steps: one request, then each tool call it asked for, each a committed step.

The state on the execution row holds the conversation (`messages`), the calls of the last response
not yet answered (`pending`) and the answers gathered so far (`returns`). A pending call that paused
for review carries the checkpoint and attempt it waits on (`review`); when the execution runs again,
the decision on exactly that attempt says whether the call goes ahead or the reviewer's comment
becomes the call's result, verbatim.
"""

from __future__ import annotations

import json
import time
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa
from pydantic_ai.models import Model
from sqlalchemy.ext.asyncio import AsyncSession

from agents import budgets, call_edits, llm, tool_calls
from agents.gates import (
    UNKNOWN_OUTCOME_STAGE,
    caller_gate,
    pending_caller_checkpoints,
    unknown_outcome_gate,
    unreviewed,
    verdict,
)
from agents.policy import RunMode, describe_call
from agents.tools import TOOLS
from core.errors import ExecutionFailed, FailureCode
from core.event_payloads import AgentMessage, ModelRequest, TypedEvent
from core.events import append_events
from core.ids import new_id
from core.models import Checkpoint, ToolCall
from core.vocabulary import EventType

if TYPE_CHECKING:
    # A circle for the type checker only: the runner (which imports this module) hands itself to these steps.
    from agents.runner import ExecutionRunner

RUNTIME_TOOLS = ("finish", "request_review")
# An answer with nothing usable (empty, cut off) is sent back this many times in a row before the run fails.
UNUSABLE_ANSWERS_ASKED_AGAIN = 2


class ModelDriver:
    def __init__(self, runner: ExecutionRunner, model: Model, mode: RunMode) -> None:
        self.runner = runner
        self.model = model
        self.mode = mode
        self.execution_id = runner.execution_id

    async def advance(self, state: dict[str, Any]) -> bool:
        """Take the next step; False once the execution paused or ended."""
        if state["pending"]:
            return await self._answer_call(state)
        return await self._ask_model(state)

    async def _ask_model(self, state: dict[str, Any]) -> bool:
        runner = self.runner
        began = time.perf_counter()
        response = await llm.ask(
            self.model, llm.load(state["messages"]), runner.settings.agent_request_retries, self._streamer()
        )
        elapsed = time.perf_counter() - began
        usage = llm.usage_of(response, runner.settings.model_profile(state["model"]))
        calls = llm.calls_of(response)
        text = llm.text_of(response)
        refused = llm.refusal_of(response)
        # Text alone is the model's final answer and it finishes with it, unless the text was cut off.
        unusable = None if calls or refused else _unusable(text, llm.cut_off(response))
        async with runner.db.transaction() as session:
            await runner.fence(session)
            if response.parts:
                state["messages"] = [*state["messages"], *llm.dump([response])]
            if unusable is None:
                state["unusable"] = 0
            else:
                # Said why in a turn of its own; the next step asks again (each try counts against the budgets).
                state["unusable"] = state.get("unusable", 0) + 1
                state["messages"] = [*state["messages"], *llm.dump([llm.nudge(unusable)])]
            if not calls and refused is None and unusable is None:
                calls = [{"id": None, "tool": "finish", "args": {"summary": text}, "validArgs": True}]
            state["pending"] = calls
            state["returns"] = []
            asked: ModelRequest = {
                "model": usage["model"],
                "inputTokens": usage["inputTokens"],
                "outputTokens": usage["outputTokens"],
                "costUsd": usage["costUsd"],
                "durationMs": round(elapsed * 1000, 3),
                "toolCalls": len(calls),
            }
            message: AgentMessage = {"text": text}
            said: list[TypedEvent] = [(EventType.AGENT_MESSAGE, message)] if text else []
            await append_events(session, self.execution_id, [(EventType.MODEL_REQUEST, asked), *said])
            budgets.spend(state, steps=1, seconds=elapsed, tokens=usage["inputTokens"] + usage["outputTokens"])
            await runner.save(session, state)
        # The request is on record (its tokens count); then the run ends, never `completed`.
        if refused is not None:
            raise ExecutionFailed(FailureCode.MODEL_REFUSED, f"the model declined: {refused}")
        if state["unusable"] > UNUSABLE_ANSWERS_ASKED_AGAIN:
            detail = f"the model answered {state['unusable']} times in a row with nothing usable ({unusable})"
            raise ExecutionFailed(FailureCode.MODEL_REFUSED, detail)
        return True

    def _streamer(self) -> llm.TextListener:
        """Hands the answer's text, piece by piece as the model writes it, to whoever watches live (the chat's
        `delta`s, core.db `send_live`); nothing of it is stored: the agent.message event below is the record."""
        stream, index = new_id("stream"), 0

        async def piece(text: str) -> None:
            nonlocal index
            live = {"executionId": self.execution_id, "stream": stream, "index": index, "text": text}
            await self.runner.db.send_live(live)
            index += 1

        return piece

    async def _answer_call(self, state: dict[str, Any]) -> bool:
        runner = self.runner
        pending: dict[str, Any] = state["pending"][0]
        async with runner.db.transaction() as session:
            await runner.fence(session)
            if "review" in pending:
                review = pending.pop("review")
                decided = await verdict(session, review["checkpointId"], review["attempt"])
                if decided is None:
                    # Only a decision makes a paused execution runnable again; anything else is a bug to see.
                    raise RuntimeError(f"resumed at checkpoint {review['checkpointId']} without a decision")
                if decided.decision != "approve":
                    checkpoint = await session.get_one(Checkpoint, review["checkpointId"])
                    if checkpoint.stage == UNKNOWN_OUTCOME_STAGE and checkpoint.status == "pending":
                        # Settled: the call is not repeated. Nothing is left to review at this checkpoint.
                        checkpoint.status = "rejected"
                    if "step" in pending:
                        await session.execute(
                            sa.update(ToolCall)
                            .where(ToolCall.execution_id == self.execution_id, ToolCall.step_index == pending["step"])
                            .values(status="rejected", error="rejected by the reviewer")
                        )
                    return await self._answered(session, state, _rejected_text(decided.comment, decided.by))
                pending["approved"] = review["checkpointId"]
                if pending["tool"] == "request_review":
                    stage = (await session.get_one(Checkpoint, review["checkpointId"])).stage
                    who = "automatically" if decided.via == "auto" else f"by {decided.by}"
                    note = f": {decided.comment}" if decided.comment else ""
                    return await self._answered(session, state, f"Approved {who} at checkpoint {stage!r}{note}")
            name, args = pending["tool"], pending["args"]
            if name == "finish":
                return await self._finish(session, state, pending)
            if name == "request_review":
                return await self._request_review(session, state, pending)
            problem = self._refusal(pending)
            if problem is not None:
                return await self._answered(session, state, problem)
            index = pending.setdefault("step", state["nextStep"])
            state["nextStep"] = max(state["nextStep"], index + 1)
            call = await tool_calls.open_call(runner, session, index, name, args, pending["id"])
            # An approval may have edited it: the gates below, and the call itself, see it as approved so far.
            await call_edits.take_edits(session, call)
            name, args = call.tool, call.args
            action = {"tool": name, "args": args, "instruction": describe_call(name, args), "toolCallId": call.id}
            held = await self._caller_gate(session, call)
            if held is not None:
                return await self._pause(session, state, pending, held, action)
            gate = await tool_calls.gate(runner, session, call, self.mode)
            if gate is not None:
                return await self._pause(session, state, pending, gate, action)
            # Started before, never recorded: a worker died mid-call. An approval let it run once, not twice; only
            # an answer to the unknown outcome (this gate, approved) lets it run again.
            if call.status == "started" and not TOOLS[name].repeatable(args):
                unknown = await unknown_outcome_gate(session, self.execution_id, call.id, describe_call(name, args))
                if unknown.status == "pending":
                    return await self._pause(session, state, pending, unknown, action)
            await tool_calls.start_call(session, call)
            await runner.save(session, state)

        def answered(result: dict[str, Any]) -> None:
            self._take_answer(state, json.dumps(result, ensure_ascii=False, default=str))

        await tool_calls.run_call(runner, state, call, answered)
        return True

    async def _caller_gate(self, session: AsyncSession, call: ToolCall) -> Checkpoint | None:
        """The caller checkpoint this call waits at first, if it acts on the world. Enforced here, whatever the
        model wrote or asked for: the model cannot reach a side effect past an unanswered checkpoint."""
        tool = TOOLS[call.tool]
        if not tool.acts_on_world or tool.argument_problem(call.args) is not None:
            # A call that can only fail (its `record` says why) has nothing for a reviewer to approve.
            return None
        return await caller_gate(session, self.execution_id, call.id)

    def _refusal(self, pending: dict[str, Any]) -> str | None:
        name = pending["tool"]
        if name not in llm.MODEL_TOOLS:
            known = ", ".join((*llm.MODEL_TOOLS, *RUNTIME_TOOLS))
            return f"Error: there is no tool {name!r}. The tools are: {known}."
        if not pending.get("validArgs", True):
            return f"Error: the arguments of {name} must be a JSON object."
        missing = llm.missing_arguments(name, pending["args"])
        if missing:
            return f"Error: {name} needs the arguments {', '.join(missing)}."
        return None

    async def _request_review(self, session: AsyncSession, state: dict[str, Any], pending: dict[str, Any]) -> bool:
        stage = str(pending["args"].get("stage", "")).strip()
        summary = str(pending["args"].get("summary", ""))
        # Always the earliest unanswered checkpoint, whichever stage the model names: it cannot skip or reorder
        # one by asking for a later stage (the reviewer sees the stage it named in the action).
        chosen = next(iter(await pending_caller_checkpoints(session, self.execution_id)), None)
        if chosen is None:
            return await self._answered(session, state, "No checkpoint is waiting for review; carry on.")
        action = {"tool": "request_review", "args": pending["args"], "instruction": summary or f"review {stage}"}
        return await self._pause(session, state, pending, chosen, action)

    async def _finish(self, session: AsyncSession, state: dict[str, Any], pending: dict[str, Any]) -> bool:
        summary = str(pending["args"].get("summary", "")).strip() or "Finished."
        action = {"tool": "finish", "args": {"summary": summary}, "instruction": "finish the task"}
        # Every checkpoint still pending is reviewed before the run may complete, asked for or not.
        while (left := await unreviewed(session, self.execution_id)) is not None:
            if not self.mode.without_verification:
                return await self._pause(session, state, pending, left, action)
            await self.runner.pass_or_pause(session, left, action, self.mode)
        state["pending"] = []
        await self.runner.save(session, state)
        calls = await session.scalars(
            sa.select(ToolCall.tool)
            .where(ToolCall.execution_id == self.execution_id, ToolCall.status == "succeeded")
            .order_by(ToolCall.step_index)
        )
        await self.runner.complete(session, {"summary": summary, "toolCalls": list(calls)})
        return False

    async def _pause(
        self,
        session: AsyncSession,
        state: dict[str, Any],
        pending: dict[str, Any],
        checkpoint: Checkpoint,
        action: dict[str, Any],
    ) -> bool:
        if self.mode.without_verification:
            await self.runner.pass_or_pause(session, checkpoint, action, self.mode)
            pending["review"] = {"checkpointId": checkpoint.id, "attempt": checkpoint.attempt}
            await self.runner.save(session, state)
            return True
        if checkpoint.origin == "caller" and "toolCallId" not in action:
            # Paused for `finish` or `request_review`: no tool call is waiting here (a rejected one may have been).
            checkpoint.tool_call_id = None
        pending["review"] = {"checkpointId": checkpoint.id, "attempt": checkpoint.attempt}
        await self.runner.save(session, state)
        await self.runner.pause(session, checkpoint, action)
        return False

    async def _answered(self, session: AsyncSession, state: dict[str, Any], content: str) -> bool:
        """Answer the first pending call without running a tool (a refusal, a review's outcome)."""
        self._take_answer(state, content)
        await self.runner.save(session, state)
        return True

    def _take_answer(self, state: dict[str, Any], content: str) -> None:
        pending = state["pending"].pop(0)
        if pending["id"] is not None:
            state["returns"] = [*state["returns"], {"tool": pending["tool"], "id": pending["id"], "content": content}]
        if not state["pending"]:
            if state["returns"]:
                state["messages"] = [*state["messages"], *llm.dump([llm.tool_returns(state["returns"])])]
            else:
                # The model's text-only answer was sent back for revision: say so in its own turn.
                state["messages"] = [*state["messages"], *llm.dump([llm.nudge(content)])]
            state["returns"] = []


def _unusable(text: str, cut_off: bool) -> str | None:
    """What the model is told when its answer (no tool call) cannot be taken as its final answer; None when it can."""
    if cut_off:
        return "Your answer was cut off at the output limit. Call a tool, or call finish with a short summary."
    if not text:
        return "Your answer was empty. Call a tool, or call finish with a short summary when the task is done."
    return None


def _rejected_text(comment: str, by: str) -> str:
    # The reviewer's words go to the model verbatim; the first line only says whose they are.
    return f"Rejected by the reviewer ({by}). Their comment:\n{comment}" if comment else f"Rejected by {by}."
