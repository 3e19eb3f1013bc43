"""The domain's words, spelled once: execution and checkpoint statuses, decision channels and event types.

They are `StrEnum`s, so each member equals its string: rows, JSON payloads and the API keep carrying plain
strings, while the code names the word instead of retyping it (a typo becomes a NameError, not a silent miss).
"""

from __future__ import annotations

from enum import StrEnum


class ExecutionStatus(StrEnum):
    QUEUED = "queued"
    RUNNING = "running"
    AWAITING_REVIEW = "awaiting_review"
    COMPLETED = "completed"
    FAILED = "failed"
    REJECTED = "rejected"
    CANCELLED = "cancelled"


# The order is the lifecycle's; listings and error messages show them in it.
EXECUTION_STATUSES: tuple[ExecutionStatus, ...] = tuple(ExecutionStatus)
FINAL = frozenset(
    {ExecutionStatus.COMPLETED, ExecutionStatus.FAILED, ExecutionStatus.REJECTED, ExecutionStatus.CANCELLED}
)
# A tuple, not a set: the concurrency limit's SQL and its message list them in lifecycle order.
ACTIVE: tuple[ExecutionStatus, ...] = tuple(s for s in ExecutionStatus if s not in FINAL)


class CheckpointStatus(StrEnum):
    PENDING = "pending"
    AWAITING_REVIEW = "awaiting_review"
    APPROVED = "approved"
    REJECTED = "rejected"
    AUTO_APPROVED = "auto_approved"


PASSED = frozenset({CheckpointStatus.APPROVED, CheckpointStatus.AUTO_APPROVED})


class CheckpointOrigin(StrEnum):
    """Who asked for a checkpoint: the caller, the service's side-effect detection, an external agent, or the
    `human` scorer (issue 23), whose checkpoint is the final "Grade the result" after the run has ended."""

    CALLER = "caller"
    AUTO = "auto"
    AGENT = "agent"
    GRADE = "grade"


class VerdictState(StrEnum):
    PENDING = "pending"
    GRADING = "grading"
    DONE = "done"


class Channel(StrEnum):
    """How a decision arrived."""

    EMAIL = "email"
    WEB = "web"
    CHAT = "chat"
    API = "api"
    AUTO = "auto"
    TIMEOUT = "timeout"


CHANNELS: tuple[Channel, ...] = tuple(Channel)
# The channels through which a person decides; "auto" and "timeout" are the service's own.
PERSON_CHANNELS = frozenset({Channel.EMAIL, Channel.WEB, Channel.CHAT, Channel.API})


class Decision(StrEnum):
    APPROVE = "approve"
    REJECT = "reject"
    # The deadline's third policy only (onDeadline=cancel); people approve or reject.
    CANCEL = "cancel"


class EventType(StrEnum):
    """Every type of event an execution's log holds (core.events.append_event and friends)."""

    EXECUTION_CREATED = "execution.created"
    EXECUTION_STARTED = "execution.started"
    EXECUTION_RESUMED = "execution.resumed"
    EXECUTION_UPDATED = "execution.updated"
    EXECUTION_COMPLETED = "execution.completed"
    EXECUTION_FAILED = "execution.failed"
    EXECUTION_REJECTED = "execution.rejected"
    EXECUTION_CANCELLED = "execution.cancelled"
    CHECKPOINT_AWAITING_REVIEW = "checkpoint.awaiting_review"
    CHECKPOINT_DECIDED = "checkpoint.decided"
    CHECKPOINT_REVISION_REQUESTED = "checkpoint.revision_requested"
    REVIEW_REMINDER_SENT = "review.reminder_sent"
    REVIEW_ESCALATED = "review.escalated"
    REVIEW_DEADLINE_PASSED = "review.deadline_passed"
    MAIL_FAILED = "mail.failed"
    MODEL_REQUEST = "model.request"
    AGENT_MESSAGE = "agent.message"
    TOOL_CALL = "tool.call"
    TOOL_RESULT = "tool.result"
    # Issue 23: the run's verdict is recorded (after the run ended, and after a reviewer's grade when asked for).
    EXECUTION_SCORED = "execution.scored"


# The events that record an execution's reaching a final status.
ENDING_EVENTS = frozenset(
    {
        EventType.EXECUTION_COMPLETED,
        EventType.EXECUTION_FAILED,
        EventType.EXECUTION_REJECTED,
        EventType.EXECUTION_CANCELLED,
    }
)
