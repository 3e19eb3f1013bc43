"""The operations an external agent drives its execution by (`agentModel: external`): its events, its
checkpoints, its completion. Part of api/openapi_operations.py's `OPERATIONS`, in this order."""

from __future__ import annotations

from api.openapi_answers import BODY as _BODY
from api.openapi_answers import KEYED as _KEYED
from api.openapi_answers import Operation

EXTERNAL_AGENT_OPERATIONS: tuple[Operation, ...] = (
    Operation(
        "post",
        "/api/eval/executions/{executionId}/events",
        "sendExternalEvents",
        "External agent",
        "Send an external agent's events",
        "For an execution created with `agentModel: external`, driven by your own agent with a key of the same "
        "user (`eval:create`). Each event (`message`, `tool_call`, `usage`) gets its place (`seq`) in the "
        "execution's events, shows in the chat at once and counts in the metrics (tool calls, tokens, and the "
        "cost when the model's price is known). An event whose `key` was sent before is not added again, so a "
        "batch may be retried. The first call starts the run (`running`). A built-in execution is a 409 "
        "`not_external`, a cancelled one a 409 `execution_cancelled` (stop working), a finished one a 409.",
        "eval:create",
        200,
        "ExternalEventsOut",
        "Recorded: what became of each event.",
        problems=(*_KEYED, *_BODY, "not_found", "not_external", "execution_cancelled", "execution_finished"),
        parameters=("ExecutionId",),
        body_schema="ExternalEventsIn",
        body_examples={
            "events": {
                "summary": "A message, a tool call and a model request",
                "value": {
                    "events": [
                        {"key": "m1", "type": "message", "text": "Reading the notes"},
                        {
                            "key": "t1",
                            "type": "tool_call",
                            "tool": "read_notes",
                            "args": {"version": "2"},
                            "result": {"lines": 12},
                            "durationMs": 35,
                        },
                        {
                            "key": "u1",
                            "type": "usage",
                            "model": "openai:gpt-4o",
                            "inputTokens": 1000,
                            "outputTokens": 100,
                        },
                    ]
                },
            }
        },
    ),
    Operation(
        "post",
        "/api/eval/executions/{executionId}/checkpoints",
        "askExternalCheckpoint",
        "External agent",
        "Pause an external run for its reviewer",
        "Needs `eval:create`. The execution waits (`awaiting_review`) and the reviewer is told on every channel, "
        "as for the built-in agent: the chat card, the review mail with its links, the inbox, the reminders and "
        "the deadline. A caller checkpoint of the same `stage` still to be reached is the one asked. The same "
        "`key` again answers with the same checkpoint (200) and, once made, its decision: an agent that "
        "restarted mid-checkpoint asks again with its key. Wait for the decision with the GET below. Without "
        "verification the checkpoint passes at once (`auto_approved`).",
        "eval:create",
        201,
        "ExternalCheckpointOut",
        "Waiting for the reviewer (201), or the checkpoint this key asked for already (200).",
        problems=(
            *_KEYED,
            *_BODY,
            "not_found",
            "not_external",
            "execution_cancelled",
            "execution_finished",
            "awaiting_review",
            "no_reviewer",
            "conflict",
        ),
        parameters=("ExecutionId",),
        body_schema="ExternalCheckpointIn",
        body_examples={
            "send": {
                "summary": "Before sending a mail",
                "value": {
                    "key": "send-release-mail",
                    "stage": "Send",
                    "description": "Mail the release note to the team",
                    "verificationQuestion": "Send this mail?",
                    "nextAction": {"tool": "send_mail", "args": {"to": "team@example.com", "subject": "v2"}},
                },
            }
        },
    ),
    Operation(
        "get",
        "/api/eval/executions/{executionId}/checkpoints/{checkpointId}",
        "getExternalCheckpoint",
        "External agent",
        "Wait for a checkpoint's decision",
        "Needs `eval:create`. With `wait=N` (at most 60), held until a decision is made on any channel (mail "
        "link, mail reply, inbox, chat, API, a deadline), or N seconds pass: then `decision` is null; ask again. "
        "`args` are the arguments to call with, the reviewer's edits applied. A cancelled execution is a 409 "
        "`execution_cancelled`.",
        "eval:create",
        200,
        "ExternalCheckpointOut",
        "The checkpoint and its decision (null while none is made).",
        problems=(*_KEYED, "validation_failed", "not_found", "not_external", "execution_cancelled"),
        parameters=("ExecutionId", "CheckpointId", "Wait"),
    ),
    Operation(
        "post",
        "/api/eval/executions/{executionId}/complete",
        "completeExternal",
        "External agent",
        "End an external run",
        "Needs `eval:create`. `completed` with the `result`, or `failed` with the `error` (code `agent_failed`): "
        "the final status, the completion webhook and the metrics, as for a built-in run. Events after it are "
        "a 409. While a checkpoint waits it is a 409 `awaiting_review`.",
        "eval:create",
        200,
        "ExternalCompleteOut",
        "Ended.",
        problems=(
            *_KEYED,
            *_BODY,
            "not_found",
            "not_external",
            "execution_cancelled",
            "execution_finished",
            "awaiting_review",
        ),
        parameters=("ExecutionId",),
        body_schema="ExternalCompleteIn",
        body_examples={
            "done": {"summary": "Completed", "value": {"status": "completed", "result": {"output": "Mail sent."}}}
        },
    ),
)
