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
    # One of the execution's budgets (steps, agent time, tokens) is used up.
    BUDGET_EXCEEDED = "budget_exceeded"
    # The model-driven agent used its steps without finishing.
    STEP_BUDGET_EXHAUSTED = "step_budget_exhausted"
    # The agent model cannot be run here (unknown provider, missing key).
    MODEL_UNAVAILABLE = "model_unavailable"
    # The model provider did not answer (after the SDK's retries).
    PROVIDER_FAILED = "provider_failed"
    # A tool call failed and the agent cannot go on without it.
    TOOL_FAILED = "tool_failed"
    # A fault on our side; the detail names the exception, never a stack.
    INTERNAL_ERROR = "internal_error"
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
