"""An Inspect AI approver that asks a reviewer in Vouch (`pip install 'vouch-client[inspect-ai]'`).

Each tool call the approval policy routes to it becomes a checkpoint of an external execution: the sample waits
until the reviewer decides on any of Vouch's channels (mail, inbox, live chat, API), and the decision comes back
as Inspect's: approve, `modify` with the reviewer's edited arguments, or reject with their comment.

    with Client() as vouch:                                   # VOUCH_URL, VOUCH_API_KEY
        run = vouch.start_external({"taskName": "Mail eval", "taskDescription": "…",
                                    "assignedReviewer": "lee@example.com"})
    eval(task, approval=[ApprovalPolicy(vouch_approver(run.execution_id), "send_mail"),
                         ApprovalPolicy(auto_approver(), "*")])

The key comes from `VOUCH_API_KEY` (and the server from `VOUCH_URL` unless `base_url` is given), never from an
argument: Inspect writes an approver's arguments into the eval log. An execution cancelled in Vouch answers
`terminate`, which ends the sample.
"""

from __future__ import annotations

from dataclasses import replace

from inspect_ai.approval import Approval, Approver, approver
from inspect_ai.model import ChatMessage
from inspect_ai.tool import ToolCall, ToolCallView

from vouch_client.aio import AsyncClient
from vouch_client.errors import Conflict
from vouch_client.external_calls import CheckpointDecision

# The execution is over: nothing more will be decided there.
_ENDED = ("execution_cancelled", "execution_finished")


def checkpoint_key(call: ToolCall) -> str:
    return f"inspect:{call.id}"


def approval_of(call: ToolCall, decision: CheckpointDecision) -> Approval:
    """The reviewer's decision as Inspect takes it."""
    metadata = {"vouch": {"checkpointId": decision.checkpointId, "by": decision.by, "via": decision.via}}
    if decision.approved and decision.editedArgs:
        # `args` is the proposed call with the reviewer's edits applied: the call Inspect runs instead. The
        # model's rendering of the call (`view`) showed the old arguments, so it does not come along.
        modified = replace(call, arguments=dict(decision.args), view=None)
        return Approval(decision="modify", modified=modified, explanation=decision.comment or None, metadata=metadata)
    if decision.approved:
        return Approval(decision="approve", explanation=decision.comment or None, metadata=metadata)
    if decision.decision == "cancel":
        return Approval(decision="terminate", explanation="The review's deadline cancelled the execution.",
                        metadata=metadata)
    return Approval(decision="reject", explanation=decision.comment or "Rejected in Vouch.", metadata=metadata)


@approver(name="vouch")
def vouch_approver(
    execution_id: str, stage: str | None = None, question: str | None = None, base_url: str | None = None
) -> Approver:
    """Route tool approvals to the reviewer of an external execution in Vouch.

    Args:
        execution_id: The external execution (`agentModel: "external"`) whose checkpoints these calls become.
        stage: The checkpoints' stage; the tool's name unless given (a caller checkpoint named at creation
            is answered by naming its stage).
        question: What the reviewer is asked; "Let the model call <tool>?" unless given.
        base_url: Vouch's address; `VOUCH_URL` unless given. The key is always `VOUCH_API_KEY`.
    """

    async def approve(message: str, call: ToolCall, view: ToolCallView, history: list[ChatMessage]) -> Approval:
        # A client per call: Inspect runs samples in its own event loop, and a call waits for a person anyway.
        async with AsyncClient(base_url) as client:
            run = client.attach(execution_id)
            try:
                decision = await run.checkpoint(
                    stage or call.function,
                    question or f"Let the model call {call.function}?",
                    action={"tool": call.function, "args": call.arguments},
                    key=checkpoint_key(call),
                    description=message[:20000],  # the API's limit; the call itself is in the action
                )
            except Conflict as ended:
                if ended.code in _ENDED:
                    return Approval(decision="terminate", explanation=f"The Vouch execution ended ({ended.code}).")
                raise
        return approval_of(call, decision)

    return approve
