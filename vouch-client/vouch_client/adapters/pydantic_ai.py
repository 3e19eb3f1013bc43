"""pydantic-ai's deferred tool approvals, answered by a reviewer in Vouch (`pip install 'vouch-client[pydantic-ai]'`).

A tool declared with `requires_approval=True` (or one that raises `ApprovalRequired`) ends the agent's run with
`DeferredToolRequests`; each approval becomes a checkpoint of the external run, and the reviewer's decisions come
back as the `DeferredToolResults` the next run takes:

    agent = Agent(model, output_type=[str, DeferredToolRequests])
    result = await agent.run("Mail the v2 note to the team")
    if isinstance(result.output, DeferredToolRequests):
        answers = await answer_approvals(run, result.output)       # blocks until the reviewer decided each
        result = await agent.run(message_history=result.all_messages(), deferred_tool_results=answers)

or without leaving the run, on a pydantic-ai with capabilities:
`Agent(model, capabilities=[approvals_capability(run)])`.

An approval runs the tool, with the reviewer's edited arguments if they changed any (`ToolApproved(override_args=…)`);
a rejection gives the model the reviewer's comment as the denial (`ToolDenied(comment)`). Each checkpoint's key is
the tool call's id, so an agent that restarts and answers the same requests again gets the decisions already made.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pydantic_ai import DeferredToolRequests, DeferredToolResults, RunContext, ToolApproved, ToolDenied
from pydantic_ai.messages import ToolCallPart

from vouch_client.external import AsyncExternalRun, ExternalRun
from vouch_client.external_calls import CheckpointDecision

if TYPE_CHECKING:
    from pydantic_ai.capabilities import HandleDeferredToolCalls

DENIED = "The reviewer rejected this call."


def checkpoint_key(call: ToolCallPart) -> str:
    return f"pydantic-ai:{call.tool_call_id}"


def _question(call: ToolCallPart, question: str | None) -> str:
    return question or f"Let the agent call {call.tool_name}?"


def _action(call: ToolCallPart) -> dict[str, Any]:
    return {"tool": call.tool_name, "args": call.args_as_dict()}


def answer_of(decision: CheckpointDecision) -> ToolApproved | ToolDenied:
    """The reviewer's decision as pydantic-ai takes it."""
    if decision.approved:
        # `args` is the proposed call with the reviewer's edits applied; without edits the model's own stand.
        return ToolApproved(override_args=dict(decision.args)) if decision.editedArgs else ToolApproved()
    return ToolDenied(decision.comment or DENIED)


def _reviewed_by(decision: CheckpointDecision) -> dict[str, Any]:
    # The tool sees this as `ctx.tool_call_metadata`: who decided, where, and what they said.
    return {"vouch": {"checkpointId": decision.checkpointId, "by": decision.by, "via": decision.via,
                      "comment": decision.comment}}


async def answer_approvals(
    run: AsyncExternalRun, requests: DeferredToolRequests, *, stage: str | None = None, question: str | None = None
) -> DeferredToolResults:
    """Ask the reviewer about each call awaiting approval, one checkpoint after another (stage: the tool's name
    unless given), and return their decisions. Calls deferred for external execution are left unanswered."""
    answers = DeferredToolResults()
    for call in requests.approvals:
        decision = await run.checkpoint(
            stage or call.tool_name, _question(call, question), action=_action(call), key=checkpoint_key(call)
        )
        answers.approvals[call.tool_call_id] = answer_of(decision)
        answers.metadata[call.tool_call_id] = _reviewed_by(decision)
    return answers


def answer_approvals_sync(
    run: ExternalRun, requests: DeferredToolRequests, *, stage: str | None = None, question: str | None = None
) -> DeferredToolResults:
    """`answer_approvals` for a run driven through the sync `Client` (`agent.run_sync`)."""
    answers = DeferredToolResults()
    for call in requests.approvals:
        decision = run.checkpoint(
            stage or call.tool_name, _question(call, question), action=_action(call), key=checkpoint_key(call)
        )
        answers.approvals[call.tool_call_id] = answer_of(decision)
        answers.metadata[call.tool_call_id] = _reviewed_by(decision)
    return answers


def approvals_capability(
    run: AsyncExternalRun, *, stage: str | None = None, question: str | None = None
) -> HandleDeferredToolCalls[Any]:
    """A capability that answers approvals inside the run: the agent waits at each call for the reviewer and
    goes on with their decision, with no second `agent.run`. Needs a pydantic-ai with capabilities."""
    # Imported here: the rest of this module works on a pydantic-ai from before capabilities.
    from pydantic_ai.capabilities import HandleDeferredToolCalls

    async def handle(ctx: RunContext[Any], requests: DeferredToolRequests) -> DeferredToolResults | None:
        if not requests.approvals:
            return None
        return await answer_approvals(run, requests, stage=stage, question=question)

    return HandleDeferredToolCalls(handler=handle)
