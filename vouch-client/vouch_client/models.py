"""Typed requests and answers of the Vouch REST API, as the client sees them.

Answers are read tolerantly: a field the server adds later (a new status field, richer metrics) is kept, not
refused, so an older client keeps working against a newer server (`extra="allow"`; reach it with
`model.model_extra`). Values that are open sets on the server side (statuses, channels) are plain strings for
the same reason; the known values are listed in FINAL_STATUSES and the README. Requests are strict, like the
server: a misspelt field is an error here rather than a 422 there.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

FINAL_STATUSES = frozenset({"completed", "failed", "rejected", "cancelled"})
OUTCOME_EVENTS = {
    "execution.completed": "completed",
    "execution.failed": "failed",
    "execution.rejected": "rejected",
    "execution.cancelled": "cancelled",
}


class _Answer(BaseModel):
    model_config = ConfigDict(extra="allow")


class _Request(BaseModel):
    model_config = ConfigDict(extra="forbid")

    def body(self) -> dict[str, Any]:
        # Only what the caller set (and non-null): the server's defaults stay the server's.
        return self.model_dump(mode="json", exclude_unset=True)


# Requests -----------------------------------------------------------------------------------------------------


class CheckpointSpec(_Request):
    stage: str
    verificationQuestion: str
    description: str = ""


class TaskSpec(_Request):
    """The create body (spec §2.1, plus the review policy fields)."""

    taskName: str
    taskDescription: str
    checkpoints: list[CheckpointSpec] = Field(default_factory=list)
    autoDetectCheckpoints: bool = False
    testMode: Literal["with-verification", "without-verification"] = "with-verification"
    assignedReviewer: str | None = None
    webhookUrl: str | None = None
    # Events to send besides the completion notification: "checkpoint.awaiting_review", "checkpoint.decided".
    webhookEvents: list[str] | None = None
    # This task's model instead of the service's default: "offline", "openai:<model>", a profile's name, ….
    agentModel: str | None = None
    maxRevisions: int | None = None
    backupReviewer: str | None = None
    reviewDeadline: int | None = None
    onDeadline: Literal["reject", "approve", "cancel"] | None = None
    # What the run should produce (any JSON value or text), and how its `result.output` is scored: each scorer a
    # name ("exact", "includes", "human") or an object ({"type": "regex", "pattern": …}, json_schema, llm_judge).
    expected: Any = None
    scorers: list[str | dict[str, Any]] | None = None


class ExecutionPatch(_Request):
    """PATCH body: set a field to a value, or to None to clear it; fields left out stay as they are."""

    assignedReviewer: str | None = None
    webhookUrl: str | None = None


class DecisionRequest(_Request):
    decision: Literal["approve", "reject"]
    comment: str = ""
    # Approve only: the arguments of the checkpoint's tool call to change before it runs.
    editedArgs: dict[str, Any] | None = None
    # An optional grade of what the reviewer saw: 1-5, and labels.
    rating: int | None = None
    labels: list[str] | None = None


class GradeRequest(_Request):
    """The `human` scorer's grade of a completed run."""

    passed: bool
    rating: int | None = None
    labels: list[str] | None = None
    comment: str = ""


# Answers ------------------------------------------------------------------------------------------------------


class CreatedTask(_Answer):
    """The answer to a create (spec §2.3); `replayed` is true when an Idempotency-Key returned an earlier answer."""

    success: bool
    executionId: str
    chatUrl: str
    checkpointCount: int | None = None
    replayed: bool = False


class Decision(_Answer):
    decision: str
    by: str
    via: str
    at: datetime
    comment: str | None = None
    attempt: int = 1
    originalArgs: dict[str, Any] | None = None
    editedArgs: dict[str, Any] | None = None
    rating: int | None = None
    labels: list[str] | None = None


class NextAction(_Answer):
    tool: str
    args: dict[str, Any] = Field(default_factory=dict)
    editable: bool = False


class Attempt(Decision):
    remoteAddr: str | None = None


class CheckpointState(_Answer):
    checkpointId: str
    stage: str
    description: str = ""
    verificationQuestion: str
    origin: str = "caller"
    status: str
    awaitingSince: datetime | None = None
    nextAction: NextAction | None = None
    decision: Decision | None = None
    attempt: int = 1
    attempts: list[Attempt] = Field(default_factory=list)


class Metrics(_Answer):
    durationMs: int | None = None
    agentMs: int = 0
    reviewWaitMs: int = 0
    steps: int = 0
    toolCalls: int = 0


class ExecutionError(_Answer):
    """Why a run failed: `code` is stable (`task_not_understood`, `step_budget_exhausted`, `tool_failed`, …; the
    README lists them), `detail` is for a human; `task_not_understood` lists the `instructions` not understood."""

    code: str
    detail: str = ""
    instructions: list[str] = Field(default_factory=list)

    @model_validator(mode="before")
    @classmethod
    def _from_text(cls, value: Any) -> Any:
        # A server from before error codes answers a plain string.
        return {"code": "unclassified", "detail": value} if isinstance(value, str) else value

    def __str__(self) -> str:
        return f"{self.code}: {self.detail}"


class Agent(_Answer):
    """The agent running the task: `kind` is `rule-based` (the offline agent) or `model`."""

    model: str
    kind: str


class Score(_Answer):
    """One scorer's judgement: `passed` None when it could not say (never a pass)."""

    scorer: str
    type: str
    passed: bool | None = None
    score: float | None = None
    explanation: str = ""
    by: str = ""


class Verdict(_Answer):
    """Whether the run got it right, separate from its status; `state` is pending, grading or done."""

    state: str
    passed: bool | None = None
    score: float | None = None
    scores: list[Score] = Field(default_factory=list)


class StatusRecord(_Answer):
    """GET /api/eval/status/<id>: where an execution stands, its checkpoints and metrics."""

    success: bool = True
    executionId: str
    taskName: str
    status: str
    testMode: str
    assignedReviewer: str | None = None
    agentModel: str | None = None
    agent: Agent | None = None
    chatUrl: str
    createdAt: datetime
    startedAt: datetime | None = None
    completedAt: datetime | None = None
    checkpointCount: int = 0
    checkpoints: list[CheckpointState] = Field(default_factory=list)
    result: dict[str, Any] | None = None
    error: ExecutionError | None = None
    metrics: Metrics = Field(default_factory=Metrics)
    expected: Any = None
    scorers: list[dict[str, Any]] | None = None
    verdict: Verdict | None = None

    @property
    def final(self) -> bool:
        return self.status in FINAL_STATUSES

    def grade_checkpoint(self) -> CheckpointState | None:
        """The `human` scorer's "Grade the result", if it waits for its grade."""
        return next((cp for cp in self.checkpoints if cp.origin == "grade" and cp.status == "awaiting_review"), None)

    def waiting_checkpoint(self) -> CheckpointState | None:
        """The checkpoint the agent waits at, if any."""
        return next((cp for cp in self.checkpoints if cp.status == "awaiting_review"), None)


class ExecutionSummary(_Answer):
    executionId: str
    taskName: str
    status: str
    testMode: str
    assignedReviewer: str | None = None
    createdAt: datetime
    completedAt: datetime | None = None
    checkpointCount: int = 0
    chatUrl: str


class ExecutionPage(_Answer):
    """One page of GET /api/eval/executions, newest first; pass `nextCursor` back for the next."""

    success: bool = True
    items: list[ExecutionSummary]
    nextCursor: str | None = None


class DecisionAnswer(_Answer):
    success: bool = True
    executionId: str
    checkpointId: str
    decision: Decision


class FieldError(_Answer):
    """One invalid input: exactly one of pointer (body), parameter (query) or header names it."""

    pointer: str | None = None
    parameter: str | None = None
    header: str | None = None
    detail: str = ""

    @property
    def where(self) -> str:
        return self.pointer or self.parameter or self.header or "body"


class Problem(_Answer):
    """An error answer: RFC 9457 problem details, plus `code` and field `errors`."""

    type: str = "about:blank"
    title: str = ""
    status: int
    detail: str = ""
    code: str = "unknown"
    errors: list[FieldError] = Field(default_factory=list)


class Event(_Answer):
    """One event of an execution's conversation, as the chat shows it; `seq` counts from 1 without gaps."""

    executionId: str
    seq: int
    type: str
    payload: dict[str, Any] = Field(default_factory=dict)
    at: datetime | None = None

    @property
    def outcome(self) -> str | None:
        """The final status this event announces (`execution.completed` → "completed"), if it is one."""
        return OUTCOME_EVENTS.get(self.type)
