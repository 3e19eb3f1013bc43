"""What each REST operation is, in data: the source of the operations in the OpenAPI document (api/openapi.py).

Each operation lists the problem `code`s it can answer with; the document turns them into one response per
status, whose schema allows exactly those codes. The contract test runs the live service against that, so a
view that starts answering with a new code fails until the code is listed here.
"""

from __future__ import annotations

from typing import Any

from api.openapi_answers import BODY as _BODY
from api.openapi_answers import KEYED as _KEYED
from api.openapi_answers import Operation
from api.openapi_external_operations import EXTERNAL_AGENT_OPERATIONS
from api.openapi_suite_operations import SUITE_OPERATIONS

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
    *EXTERNAL_AGENT_OPERATIONS,
    *SUITE_OPERATIONS,
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
