"""The OpenAI Agents SDK: tool approvals answered by Vouch's reviewer (`pip install 'vouch-client[openai-agents]'`).

`VouchApprovals.gate(tool)` gives a function tool a `needs_approval` callable that asks Vouch (a checkpoint with
the call's arguments, the reviewer told on every channel) and interrupts the SDK's run; `VouchApprovals.decide`
waits for the reviewer and feeds each decision into the run's `RunState` (`approve`, or `reject` with the
reviewer's comment as the message the model reads); `VouchApprovals.run` does both until the agent is done:

    @function_tool
    def send_mail(to: str, subject: str) -> str: ...

    async with AsyncClient(url, key) as vouch:
        run = await vouch.start_external(task)
        approvals = VouchApprovals(run)
        agent = Agent(name="Mailer", tools=[approvals.gate(send_mail, stage="Send", question="Send this mail?")])
        result = await approvals.run(agent, "Mail the team about v2")
        await run.complete({"output": result.final_output})

Edited arguments: the SDK binds an approval to the exact call the model made (`RunState.approve` takes no new
arguments), so the gated tool applies the reviewer's edits itself: when the approved call runs, it asks Vouch for
the decision again (by the same key) and calls the tool with the arguments as the reviewer left them. The model
sees the result of the call that was made.

Keys are the model's call ids (`openai-agents:<call_id>`), which the SDK keeps in a saved `RunState`: a process
restarted from `RunState.from_string` asks the same checkpoints and gets the decisions made meanwhile.
"""

from __future__ import annotations

import copy
import json
import time
from dataclasses import dataclass
from typing import Any

from agents import Agent, FunctionTool, RunContextWrapper, Runner, RunResult, RunState, ToolApprovalItem
from agents.tool_context import ToolContext

from vouch_client.external import AsyncExternalRun
from vouch_client.external_calls import CheckpointDecision


@dataclass(frozen=True)
class _Gate:
    stage: str
    question: str
    description: str


class VouchApprovals:
    """The function tools of one run whose calls wait for Vouch's reviewer."""

    def __init__(self, run: AsyncExternalRun) -> None:
        self.vouch = run
        self._gates: dict[str, _Gate] = {}

    def gate(self, tool: FunctionTool, *, stage: str, question: str, description: str = "") -> FunctionTool:
        """A copy of `tool` whose every call waits for the reviewer, and runs with the reviewer's arguments."""
        gate = _Gate(stage, question, description)
        self._gates[tool.name] = gate
        invoke_tool = tool.on_invoke_tool

        async def needs_approval(_context: RunContextWrapper[Any], args: dict[str, Any], call_id: str) -> bool:
            # The reviewer is told now, while the model's turn ends; no pause for a call already approved (a run
            # without verification passes at once, and a restarted run finds the decisions made meanwhile).
            return not (await self._ask(gate, tool.name, args, call_id)).approved

        async def invoke(context: ToolContext[Any], arguments: str) -> Any:
            decision = await self._ask(gate, tool.name, json.loads(arguments or "{}"), context.tool_call_id)
            if not decision.approved:
                raise RuntimeError(f"{tool.name} called without the reviewer's approval ({decision.decision})")
            arguments = json.dumps(decision.args)
            started = time.monotonic()
            result = await invoke_tool(context, arguments)
            await self.vouch.tool_call(
                tool.name, decision.args, result=str(result), duration_ms=(time.monotonic() - started) * 1000,
                key=f"openai-agents:{context.tool_call_id}:call",
            )
            return result

        gated = copy.copy(tool)
        gated.needs_approval = needs_approval
        gated.on_invoke_tool = invoke
        return gated

    async def _ask(self, gate: _Gate, tool: str, args: dict[str, Any], call_id: str) -> CheckpointDecision:
        return await self.vouch.ask(
            gate.stage, gate.question, action={"tool": tool, "args": args}, key=f"openai-agents:{call_id}",
            description=gate.description,
        )

    def ours(self, state: RunState[Any, Any]) -> list[ToolApprovalItem]:
        """The state's interruptions that are calls of a gated tool."""
        return [item for item in state.get_interruptions() if item.tool_name in self._gates]

    async def decide(self, state: RunState[Any, Any]) -> None:
        """Wait for the reviewer's decision on each gated call the run stopped at, and record it in `state`."""
        for item in self.ours(state):
            gate = self._gates[item.tool_name or ""]
            args = json.loads(item.arguments or "{}")
            asked = await self._ask(gate, item.tool_name or "", args, item.call_id or "")
            decision = asked if asked.decision is not None else await self.vouch.wait_decision(asked.checkpointId)
            if decision.approved:
                state.approve(item)
            else:
                comment = decision.comment or "no reason given"
                state.reject(item, rejection_message=f"The reviewer rejected this call: {comment}")

    async def run(self, agent: Agent[Any], input: str | RunState[Any, Any], **options: Any) -> RunResult:
        """`Runner.run` until the agent is done, each gated call decided by the reviewer on the way; a run that
        stops at other interruptions is returned as it is."""
        result = await Runner.run(agent, input, **options)
        while result.interruptions:
            state = result.to_state()
            if not self.ours(state):
                return result
            await self.decide(state)
            result = await Runner.run(agent, state, **options)
        return result
