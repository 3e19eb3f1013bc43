"""What each REST operation is, in data: the source of the operations in the OpenAPI document (api/openapi.py).

Each operation lists the problem `code`s it can answer with; the document turns them into one response per
status, whose schema allows exactly those codes. The contract test runs the live service against that, so a
view that starts answering with a new code fails until the code is listed here.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

# code → (status, what it means). The README's error table, as data.
PROBLEM_CODES: dict[str, tuple[int, str]] = {
    "invalid_json": (400, "The body is not valid JSON."),
    "invalid_body": (400, "The body is valid JSON but not an object."),
    "invalid_idempotency_key": (400, "`Idempotency-Key` is not one value of 1 to 255 printable ASCII characters."),
    "invalid_cursor": (400, "`cursor` is not one this service handed out; start again without it."),
    "missing_api_key": (401, "No `Authorization` header."),
    "malformed_authorization": (401, "The `Authorization` header is not `Bearer <API key>`."),
    "invalid_api_key": (401, "The key is not a valid key (mistyped, unknown or from another server)."),
    "api_key_expired": (401, "The key has expired."),
    "api_key_revoked": (401, "The key has been revoked."),
    "insufficient_scope": (403, "The key lacks the scope this operation requires."),
    "not_assigned_reviewer": (
        403,
        "Only the execution's `assignedReviewer` (or its `backupReviewer`, once escalated) may decide its checkpoints.",
    ),
    "not_found": (404, "No such execution or checkpoint, or it belongs to another user."),
    "method_not_allowed": (405, "This method is not served on this path; `Allow` lists the ones that are."),
    "already_decided": (409, "The checkpoint was already decided; `detail` names who, via what channel and when."),
    "checkpoint_not_awaiting_review": (409, "The agent has not reached this checkpoint yet."),
    "execution_not_awaiting_review": (
        409,
        "The execution ended (cancelled, failed); the checkpoint will not be reached.",
    ),
    "execution_finished": (409, "The execution has finished; it can no longer change or be cancelled."),
    "execution_not_finished": (
        409,
        "The execution has not finished: cancel it before deleting it; its completion is sent once it finishes.",
    ),
    "not_external": (409, "The execution is run by a built-in agent; only an `external` one takes these calls."),
    "execution_cancelled": (409, "The execution was cancelled: the external agent should stop."),
    "awaiting_review": (409, "A checkpoint of the execution waits for its reviewer; wait for the decision."),
    "no_reviewer": (409, "The execution names no `assignedReviewer` to ask; PATCH one first."),
    "conflict": (409, "The same key is being handled by another request; send it again."),
    "webhook_not_configured": (409, "The execution has no `webhookUrl`; there is nothing to redeliver."),
    "verdict_pending": (409, "The run's verdict is not recorded yet; its completion is sent once it is."),
    "no_grade_requested": (409, "The run has no grade to give: no `human` scorer, or it has not completed yet."),
    "idempotency_key_in_use": (409, "The first request with this `Idempotency-Key` is still running; retry shortly."),
    "content_too_large": (413, "The body is larger than 1 MiB."),
    "unsupported_media_type": (415, "The body was not sent as `Content-Type: application/json`."),
    "validation_failed": (422, "Invalid fields or parameters; `errors[]` names each one."),
    "idempotency_key_reused": (422, "This `Idempotency-Key` was used with a different body."),
    "rate_limit_exceeded": (429, "The key's request rate is at its limit; wait `Retry-After` seconds."),
    "concurrent_limit_exceeded": (429, "The key has as many executions in progress as it may; `Retry-After` hints."),
    "internal_error": (500, "A fault on our side; `detail` quotes the request id. No internals are shown."),
}

# Answers every authenticated operation can give.
_KEYED = (
    *("missing_api_key", "malformed_authorization", "invalid_api_key", "api_key_expired", "api_key_revoked"),
    *("insufficient_scope", "rate_limit_exceeded", "internal_error"),
)
# Answers of an operation that reads a JSON body.
_BODY = ("invalid_json", "invalid_body", "content_too_large", "unsupported_media_type", "validation_failed")


@dataclass(frozen=True)
class Operation:
    method: str
    path: str
    operation_id: str
    tag: str
    summary: str
    description: str
    scope: str | None  # None: public, no key needed
    success_status: int
    success_schema: str | None  # a component schema; None: no body (or `success_media` says what)
    success_description: str
    problems: tuple[str, ...] = ()
    parameters: tuple[str, ...] = ()  # names in components.parameters
    body_schema: str | None = None
    body_examples: dict[str, Any] = field(default_factory=dict)
    success_headers: tuple[str, ...] = ()  # names in components.headers (always sent)
    optional_headers: tuple[str, ...] = ()  # sent on some answers only
    success_media: str = "application/json"
    links: dict[str, Any] = field(default_factory=dict)


_EXAMPLE_TASK = {
    "taskName": "Release note",
    "taskDescription": (
        'Write a note called "notes.md" saying "v2 is out". Then send an email to team@example.com '
        'with subject "v2" and body "v2 is out". Then summarise.'
    ),
    "testMode": "with-verification",
    "assignedReviewer": "you@example.com",
    "checkpoints": [{"stage": "Send", "description": "Mail to the team", "verificationQuestion": "Send it?"}],
}


def _execution_link(operation_id: str, description: str) -> dict[str, Any]:
    return {
        "operationId": operation_id,
        "parameters": {"executionId": "$response.body#/executionId"},
        "description": description,
    }


OPERATIONS: tuple[Operation, ...] = (
    Operation(
        "post",
        "/api/eval/create-task-agent",
        "createTask",
        "Executions",
        "Create an evaluation task",
        "Creates a task and starts an agent execution for it (spec §4.1). The execution is `queued` at once; a "
        "worker picks it up. With `testMode` `with-verification`, the agent pauses at each checkpoint until the "
        "`assignedReviewer` approves or rejects it.\n\n"
        "`taskName` and `taskDescription` are required and non-blank. `assignedReviewer` is required when the mode "
        "is `with-verification` and there are checkpoints (or `autoDetectCheckpoints` is true). Unknown fields are "
        "refused, so a typo never passes silently.\n\n"
        "Send `Idempotency-Key` to make a retry safe: within 24 hours the same key with the same body returns the "
        "first answer again (with `Idempotent-Replayed: true`) and creates nothing; the same key with another "
        "body is a 422; while the first request still runs, a 409.",
        "eval:create",
        201,
        "CreateTaskOut",
        "Created: the execution is queued. `Location` is its status record.",
        problems=(
            *_KEYED,
            *_BODY,
            "invalid_idempotency_key",
            "idempotency_key_in_use",
            "idempotency_key_reused",
            "concurrent_limit_exceeded",
        ),
        parameters=("IdempotencyKey",),
        body_schema="CreateTaskIn",
        body_examples={
            "withReview": {"summary": "Pause before sending mail", "value": _EXAMPLE_TASK},
            "automatic": {
                "summary": "Fully automated",
                "value": {
                    "taskName": "Digest",
                    "taskDescription": 'Write a note called "digest.md" saying "all good". Then summarise.',
                    "testMode": "without-verification",
                },
            },
        },
        success_headers=("Location",),
        optional_headers=("Idempotent-Replayed",),
        links={
            "GetStatus": _execution_link("getExecutionStatus", "The status record of the new execution."),
            "Update": _execution_link("updateExecution", "Change its reviewer or webhook."),
            "Cancel": _execution_link("cancelExecution", "Cancel it."),
            "Delete": _execution_link("deleteExecution", "Delete it once finished."),
        },
    ),
    Operation(
        "get",
        "/api/eval/status/{executionId}",
        "getExecutionStatus",
        "Executions",
        "Get an execution's status",
        "The status record (spec §4.2): status, checkpoints with their decisions, the result and the metrics. "
        "Poll it, or watch the `chatUrl` live. Another user's execution answers 404, exactly like an unknown id.",
        "eval:read",
        200,
        "StatusRecordOut",
        "The status record.",
        problems=(*_KEYED, "not_found"),
        parameters=("ExecutionId",),
        links={
            "Decide": {
                "operationId": "decideCheckpoint",
                "parameters": {
                    "executionId": "$response.body#/executionId",
                    "checkpointId": "$response.body#/checkpoints/0/checkpointId",
                },
                "description": "Approve or reject its first checkpoint.",
            }
        },
    ),
    Operation(
        "get",
        "/api/eval/executions",
        "listExecutions",
        "Executions",
        "List your executions",
        "Your executions, newest first, a page at a time. Pass `nextCursor` back as `cursor` for the next page; it "
        "is null on the last one. Pages never repeat or skip an execution while new ones are created. An unknown "
        "status, a bad `limit` or an unknown query parameter is a 422 whose `errors[]` name the `parameter`.",
        "eval:read",
        200,
        "ExecutionListOut",
        "A page of executions.",
        problems=(*_KEYED, "invalid_cursor", "validation_failed"),
        parameters=("StatusFilter", "Limit", "Cursor"),
    ),
    Operation(
        "get",
        "/api/eval/models",
        "listModels",
        "Executions",
        "List the models a task may choose",
        "The names `agentModel` accepts on create: the operator's model profiles (provider, model, temperature, "
        "output limit and prices, never a key or an address), `offline`, and `openai:<model>` / "
        "`anthropic:<model>`; and `default`, the model of a task that names none. Any other name is a 422 on "
        "create.",
        "eval:read",
        200,
        "ModelChoicesOut",
        "The choices.",
        problems=_KEYED,
    ),
    Operation(
        "patch",
        "/api/eval/executions/{executionId}",
        "updateExecution",
        "Manage",
        "Change an execution's reviewer or webhook",
        "Changes `assignedReviewer` and/or `webhookUrl` of an execution that has not finished, validated as on "
        "create; `null` clears a field (the reviewer only when no checkpoint needs one). After a new reviewer is "
        "named, only that reviewer can decide a waiting checkpoint. A finished execution is a 409.",
        "eval:manage",
        200,
        "StatusRecordOut",
        "Changed: the status record.",
        problems=(*_KEYED, *_BODY, "not_found", "execution_finished"),
        parameters=("ExecutionId",),
        body_schema="ExecutionPatchIn",
        body_examples={
            "reviewer": {"summary": "Name another reviewer", "value": {"assignedReviewer": "lee@example.com"}}
        },
    ),
    Operation(
        "delete",
        "/api/eval/executions/{executionId}",
        "deleteExecution",
        "Manage",
        "Delete a finished execution",
        "Deletes a finished execution (`completed`, `failed`, `rejected`, `cancelled`) with its checkpoints, "
        "decisions, events, tool calls and files; its status is a 404 afterwards. An unfinished one is a 409: "
        "cancel it first.",
        "eval:manage",
        204,
        None,
        "Deleted.",
        problems=(*_KEYED, "not_found", "execution_not_finished"),
        parameters=("ExecutionId",),
    ),
    Operation(
        "post",
        "/api/eval/executions/{executionId}/cancel",
        "cancelExecution",
        "Manage",
        "Cancel an execution",
        "Moves a `queued`, `running` or `awaiting_review` execution to `cancelled`. A worker running it stops "
        "before its next step. Deciding one of its checkpoints afterwards is a 409 "
        "`execution_not_awaiting_review`. Cancelling a finished execution is a 409. No body is read.",
        "eval:manage",
        200,
        "StatusRecordOut",
        "Cancelled: the status record.",
        problems=(*_KEYED, "not_found", "execution_finished"),
        parameters=("ExecutionId",),
    ),
    Operation(
        "post",
        "/api/eval/executions/{executionId}/checkpoints/{checkpointId}/decision",
        "decideCheckpoint",
        "Review",
        "Approve or reject a checkpoint",
        "The reviewer's programmatic channel. Only the execution's `assignedReviewer` may decide (the key's user "
        "must be that e-mail address), and its `backupReviewer` once the waiting attempt was escalated to them; "
        "the execution's owner sees a 403, anyone else a 404. The first answer wins "
        "whatever the channel (e-mail, web, chat, API); a later one is a 409 `already_decided` that names who "
        "decided, via what, and when. Approve resumes the agent (with `editedArgs`, its tool call runs with the "
        "reviewer's arguments); reject needs a `comment`: the agent revises from it, or, once `maxRevisions` is "
        "used up (or for the rule-based `offline` agent, at once), the execution ends `rejected`.",
        "eval:manage",
        200,
        "DecisionAnswerOut",
        "Decided: the decision as recorded.",
        problems=(
            *_KEYED,
            *_BODY,
            "not_found",
            "not_assigned_reviewer",
            "already_decided",
            "checkpoint_not_awaiting_review",
            "execution_not_awaiting_review",
        ),
        parameters=("ExecutionId", "CheckpointId"),
        body_schema="DecisionIn",
        body_examples={
            "approve": {"summary": "Approve", "value": {"decision": "approve", "comment": "looks right"}},
            "edit": {
                "summary": "Approve with an edited argument",
                "value": {"decision": "approve", "editedArgs": {"subject": "Quarterly report (final)"}},
            },
            "reject": {"summary": "Reject", "value": {"decision": "reject", "comment": "use the new figures"}},
        },
    ),
    Operation(
        "post",
        "/api/eval/executions/{executionId}/grade",
        "gradeExecution",
        "Review",
        "Grade the result",
        "The `human` scorer's grade of a completed run: pass or fail, an optional 1-5 rating, labels and a "
        "comment. It answers the run's `grade` checkpoint, so the same rules hold as for a decision: only the "
        "assigned reviewer (or the backup once escalated) may grade, the owner sees a 403 and anyone else a 404, "
        "and the first answer on any channel wins (a later one is a 409 `already_decided`). A run with no grade "
        "to give (no `human` scorer, or not completed yet) is a 409 `no_grade_requested`. The verdict is "
        "recorded with the grade, and the completion webhook, held back until then, carries it.",
        "eval:manage",
        200,
        "DecisionAnswerOut",
        "Graded: the decision as recorded.",
        problems=(*_KEYED, *_BODY, "not_found", "not_assigned_reviewer", "already_decided", "no_grade_requested"),
        parameters=("ExecutionId",),
        body_schema="GradeIn",
        body_examples={
            "fail": {
                "summary": "Fail with a rating and labels",
                "value": {"passed": False, "rating": 2, "labels": ["wrong-format"], "comment": "Say more."},
            },
        },
    ),
    Operation(
        "post",
        "/api/eval/executions/{executionId}/webhook/redeliver",
        "redeliverWebhook",
        "Manage",
        "Send the completion webhook again",
        "Queues the completion notification (`execution.completed`) of a finished execution again, as a new "
        "message with a new `webhook-id`, to the execution's `webhookUrl`; it is retried like the first. Its "
        "attempts show in the status record's `webhook.deliveries`. An execution without a `webhookUrl`, or one "
        "that has not finished, is a 409. No body is read.\n\n"
        "Every webhook is signed per Standard Webhooks (`webhook-id`, `webhook-timestamp`, `webhook-signature`) "
        "with your account's `whsec_…` secret, shown on the account's webhook page.",
        "eval:manage",
        202,
        "RedeliveryOut",
        "Queued: the new message's id.",
        problems=(*_KEYED, "not_found", "webhook_not_configured", "execution_not_finished", "verdict_pending"),
        parameters=("ExecutionId",),
    ),
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
                        {"key": "t1", "type": "tool_call", "tool": "read_notes", "args": {"version": "2"},
                         "result": {"lines": 12}, "durationMs": 35},
                        {"key": "u1", "type": "usage", "model": "openai:gpt-4o", "inputTokens": 1000,
                         "outputTokens": 100},
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
            *_KEYED, *_BODY, "not_found", "not_external", "execution_cancelled", "execution_finished",
            "awaiting_review", "no_reviewer", "conflict",
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
            *_KEYED, *_BODY, "not_found", "not_external", "execution_cancelled", "execution_finished",
            "awaiting_review",
        ),
        parameters=("ExecutionId",),
        body_schema="ExternalCompleteIn",
        body_examples={
            "done": {"summary": "Completed", "value": {"status": "completed", "result": {"output": "Mail sent."}}}
        },
    ),
    Operation(
        "get",
        "/api/openapi.json",
        "getOpenApiDocument",
        "Documentation",
        "This OpenAPI document",
        "The OpenAPI 3.1 description of the API. Public: it describes, it does not act.",
        None,
        200,
        None,
        "The OpenAPI document.",
        problems=("internal_error",),
    ),
    Operation(
        "get",
        "/api/docs",
        "getApiDocs",
        "Documentation",
        "The API reference page",
        "This document as a readable web page. Public.",
        None,
        200,
        None,
        "An HTML page.",
        problems=("internal_error",),
        success_media="text/html",
    ),
)
