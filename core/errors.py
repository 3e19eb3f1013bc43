"""Why an execution failed: one vocabulary of stable codes for every agent, the status record and the webhook.

A failed execution's error is `{"code": ..., "detail": ..., ...}`: `code` is one of `FailureCode` (callers
branch on it; it never changes meaning), `detail` is one sentence for a human, and a code may add fields
of its own (`task_not_understood` lists the `instructions` the agent could not carry out). An agent ends
an execution with a code by raising `ExecutionFailed`; any other exception becomes `internal_error`.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any


class FailureCode(StrEnum):
    # The rule-based agent met an instruction it cannot carry out; nothing was done.
    TASK_NOT_UNDERSTOOD = "task_not_understood"
    # The agent used its steps without finishing.
    STEP_BUDGET_EXHAUSTED = "step_budget_exhausted"
    # The agent used its agent time without finishing.
    TIME_BUDGET_EXHAUSTED = "time_budget_exhausted"
    # The model-driven agent used its tokens without finishing.
    TOKEN_BUDGET_EXHAUSTED = "token_budget_exhausted"
    # The agent model cannot be reached or run: its provider is down, overloaded or rate limiting after the
    # retries with backoff, or it cannot be run here (unknown provider, missing key).
    MODEL_UNAVAILABLE = "model_unavailable"
    # The model provider refused the request (bad key, unknown model, a request it cannot take) or answered
    # with something that is not a response; retrying would not help.
    PROVIDER_FAILED = "provider_failed"
    # The model declined the task (a refusal, a content filter) or kept answering with nothing usable.
    MODEL_REFUSED = "model_refused"
    # A tool call failed and the agent cannot go on without it.
    TOOL_FAILED = "tool_failed"
    # A fault on our side; the detail names the exception, never a stack.
    INTERNAL_ERROR = "internal_error"
    # An external agent (agentModel "external") sent nothing for VOUCH_EXTERNAL_IDLE_SECONDS while not waiting
    # for a review: it is taken to have gone away.
    AGENT_LOST = "agent_lost"
    # An external agent ended its run failed; the detail is its own words.
    AGENT_FAILED = "agent_failed"
    # A failure recorded before errors had codes: only its text is known.
    UNCLASSIFIED = "unclassified"


class ExecutionFailed(Exception):
    """End the execution `failed` with this code; `extra` holds the code's own fields."""

    def __init__(self, code: FailureCode, detail: str, **extra: Any) -> None:
        super().__init__(detail)
        self.code = code
        self.detail = detail
        self.extra = extra

    def as_json(self) -> dict[str, Any]:
        return failure(self.code, self.detail, **self.extra)


def failure(code: FailureCode, detail: str, **extra: Any) -> dict[str, Any]:
    """The error object of a failed execution, as stored and served."""
    return {"code": str(code), "detail": detail, **extra}


def error_object(info: dict[str, Any] | None, text: str | None) -> dict[str, Any] | None:
    """The error to serve for a row: its structured error, else (a row failed before codes) its text."""
    if info is not None:
        return info
    if text is None:
        return None
    return failure(FailureCode.UNCLASSIFIED, text)
