"""How an operation of the REST API is described (`Operation`) and the problem `code`s it may answer with: the
terms api/openapi_operations.py and api/openapi_external_operations.py are written in."""

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
    "not_found": (404, "No such execution, checkpoint or suite, or it belongs to another user."),
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
    "suite_finished": (409, "The suite has completed or was cancelled; it can no longer be cancelled."),
    "idempotency_key_in_use": (409, "The first request with this `Idempotency-Key` is still running; retry shortly."),
    "content_too_large": (413, "The body is larger than 1 MiB."),
    "unsupported_media_type": (415, "The body was not sent as `Content-Type: application/json`."),
    "validation_failed": (422, "Invalid fields or parameters; `errors[]` names each one."),
    "suite_too_large": (422, "The suite plans more than 2,000 runs (tasks x models x repeats x modes)."),
    "idempotency_key_reused": (422, "This `Idempotency-Key` was used with a different body."),
    "rate_limit_exceeded": (429, "The key's request rate is at its limit; wait `Retry-After` seconds."),
    "concurrent_limit_exceeded": (429, "The key has as many executions in progress as it may; `Retry-After` hints."),
    "internal_error": (500, "A fault on our side; `detail` quotes the request id. No internals are shown."),
}

# Answers every authenticated operation can give.
KEYED = (
    *("missing_api_key", "malformed_authorization", "invalid_api_key", "api_key_expired", "api_key_revoked"),
    *("insufficient_scope", "rate_limit_exceeded", "internal_error"),
)
# Answers of an operation that reads a JSON body.
BODY = ("invalid_json", "invalid_body", "content_too_large", "unsupported_media_type", "validation_failed")


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
    # Further media types of the success answer (a body of bytes each), when a parameter chooses among them.
    more_media: tuple[str, ...] = ()
    links: dict[str, Any] = field(default_factory=dict)
