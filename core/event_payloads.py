"""The payload of each event type (core.vocabulary.EventType), as the log stores and the API and chat serve it.

`core.events.append_event` is overloaded on these, so mypy checks each event its callers append. Keys are the
wire's camelCase; the values are JSON's.
"""

from __future__ import annotations

from typing import Any, Literal, NotRequired, TypedDict

from core.vocabulary import EventType


class ExecutionCreated(TypedDict):
    taskName: str
    taskDescription: str
    testMode: str
    assignedReviewer: str | None
    checkpointCount: int


class ExecutionClaimed(TypedDict):
    """execution.started (the first claim) and execution.resumed (a later one, after a pause or a lost lease);
    an external agent's run is started by its first call, with `agent` instead of a worker."""

    worker: NotRequired[str]
    agent: NotRequired[str]


# "from" is a keyword: the functional form.
ExecutionUpdated = TypedDict("ExecutionUpdated", {"field": str, "from": str | None, "to": str | None, "by": str})


class ExecutionCompleted(TypedDict):
    status: str
    result: dict[str, Any]


class ExecutionFailed(TypedDict):
    status: str
    error: dict[str, Any]


class ExecutionRejected(TypedDict):
    status: str
    checkpointId: str
    comment: str
    by: str
    attempt: int


class ExecutionCancelled(TypedDict):
    status: str
    by: str
    # Set when a deadline cancelled it (via "timeout"); a caller's cancel has none.
    via: NotRequired[str]


class CheckpointAwaitingReview(TypedDict):
    checkpointId: str
    position: int
    stage: str
    description: str
    verificationQuestion: str | None
    origin: str
    attempt: int
    toolCallId: str | None
    nextAction: dict[str, Any] | None
    guards: NotRequired[dict[str, Any]]
    readsComments: bool | None


class DecisionJson(TypedDict):
    """A decision as the API serves it (review.decision_records.DecisionRecord.as_json)."""

    decision: str
    by: str
    via: str
    at: str | None
    comment: str
    attempt: int
    originalArgs: dict[str, Any] | None
    editedArgs: dict[str, Any] | None
    # Issue 23: the reviewer's optional 1-5 rating and labels.
    rating: int | None
    labels: list[str] | None


class CheckpointDecided(DecisionJson):
    checkpointId: str


class CheckpointRevisionRequested(TypedDict):
    checkpointId: str
    attempt: int
    nextAttempt: int
    comment: str
    by: str


class ReviewTimerFired(TypedDict):
    """review.reminder_sent and review.escalated: whom the mail went to."""

    checkpointId: str
    attempt: int
    stage: str
    to: str


class ReviewDeadlinePassed(TypedDict):
    checkpointId: str
    attempt: int
    stage: str
    policy: str


class MailFailed(TypedDict):
    messageId: str
    to: str
    subject: str
    reason: str
    attempts: int


class ModelUsage(TypedDict):
    """Tokens and price of one model response (agents.llm.usage_of)."""

    # The name the provider answered with; a provider may give none.
    model: str | None
    inputTokens: int
    outputTokens: int
    costUsd: float | None


class ModelRequest(ModelUsage):
    durationMs: float
    toolCalls: int
    # An external agent's own key for the event it sent (api/external.py).
    key: NotRequired[str]


class Revision(TypedDict):
    checkpointId: str
    attempt: int
    comment: str


class AgentMessage(TypedDict):
    text: str
    # The offline agent's answer to a rejection's comment: in logs written while it was still sent back to revise
    # (it no longer is: a rejection ends its run, review.decide).
    revision: NotRequired[Revision]
    key: NotRequired[str]


class ToolCallPayload(TypedDict):
    toolCallId: str
    tool: str
    args: dict[str, Any]
    # None for an external agent's call: the service does not know what its tools do.
    actsOnWorld: bool | None
    key: NotRequired[str]


class ToolResult(TypedDict):
    toolCallId: str
    tool: str
    result: NotRequired[dict[str, Any] | None]
    error: NotRequired[str]
    durationMs: float
    key: NotRequired[str]


class ExecutionScored(TypedDict):
    """The verdict (core/scorers.py `verdict_json`), recorded once."""

    passed: bool | None
    score: float | None
    scores: list[dict[str, Any]]


# Which payload each event type carries; a test keeps it complete.
PAYLOADS: dict[EventType, type] = {
    EventType.EXECUTION_CREATED: ExecutionCreated,
    EventType.EXECUTION_STARTED: ExecutionClaimed,
    EventType.EXECUTION_RESUMED: ExecutionClaimed,
    EventType.EXECUTION_UPDATED: ExecutionUpdated,
    EventType.EXECUTION_COMPLETED: ExecutionCompleted,
    EventType.EXECUTION_FAILED: ExecutionFailed,
    EventType.EXECUTION_REJECTED: ExecutionRejected,
    EventType.EXECUTION_CANCELLED: ExecutionCancelled,
    EventType.CHECKPOINT_AWAITING_REVIEW: CheckpointAwaitingReview,
    EventType.CHECKPOINT_DECIDED: CheckpointDecided,
    EventType.CHECKPOINT_REVISION_REQUESTED: CheckpointRevisionRequested,
    EventType.REVIEW_REMINDER_SENT: ReviewTimerFired,
    EventType.REVIEW_ESCALATED: ReviewTimerFired,
    EventType.REVIEW_DEADLINE_PASSED: ReviewDeadlinePassed,
    EventType.MAIL_FAILED: MailFailed,
    EventType.MODEL_REQUEST: ModelRequest,
    EventType.AGENT_MESSAGE: AgentMessage,
    EventType.TOOL_CALL: ToolCallPayload,
    EventType.TOOL_RESULT: ToolResult,
    EventType.EXECUTION_SCORED: ExecutionScored,
}


# An event as `core.events.append_events` takes it: its type with the payload that type carries (PAYLOADS).
TypedEvent = (
    tuple[Literal[EventType.EXECUTION_CREATED], ExecutionCreated]
    | tuple[Literal[EventType.EXECUTION_STARTED, EventType.EXECUTION_RESUMED], ExecutionClaimed]
    | tuple[Literal[EventType.EXECUTION_UPDATED], ExecutionUpdated]
    | tuple[Literal[EventType.EXECUTION_COMPLETED], ExecutionCompleted]
    | tuple[Literal[EventType.EXECUTION_FAILED], ExecutionFailed]
    | tuple[Literal[EventType.EXECUTION_REJECTED], ExecutionRejected]
    | tuple[Literal[EventType.EXECUTION_CANCELLED], ExecutionCancelled]
    | tuple[Literal[EventType.CHECKPOINT_AWAITING_REVIEW], CheckpointAwaitingReview]
    | tuple[Literal[EventType.CHECKPOINT_DECIDED], CheckpointDecided]
    | tuple[Literal[EventType.CHECKPOINT_REVISION_REQUESTED], CheckpointRevisionRequested]
    | tuple[Literal[EventType.REVIEW_REMINDER_SENT, EventType.REVIEW_ESCALATED], ReviewTimerFired]
    | tuple[Literal[EventType.REVIEW_DEADLINE_PASSED], ReviewDeadlinePassed]
    | tuple[Literal[EventType.MAIL_FAILED], MailFailed]
    | tuple[Literal[EventType.MODEL_REQUEST], ModelRequest]
    | tuple[Literal[EventType.AGENT_MESSAGE], AgentMessage]
    | tuple[Literal[EventType.TOOL_CALL], ToolCallPayload]
    | tuple[Literal[EventType.TOOL_RESULT], ToolResult]
)
