"""Response models of the external agent's routes (issue 22): its events, its checkpoints, its run's end."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import Field

from api.openapi_fields import Channel, CheckpointId, CheckpointStatus, ExecutionId, ExecutionStatus, Out, Succeeded


class ExternalEventOut(Out):
    """What became of one event sent."""

    key: str = Field(description="The event's key, as sent.")
    seq: int | None = Field(description="Its place in the execution's events (a tool call's: the call's).")
    duplicate: bool = Field(description="True when the key was sent before: nothing was added this time.")


class ExternalEventsOut(Out):
    """The answer to events sent by an external agent."""

    success: Succeeded
    executionId: ExecutionId
    events: list[ExternalEventOut] = Field(description="One per event sent, in the order sent.")


class ExternalCheckpointOut(Out):
    """A checkpoint as its external agent sees it: waiting, or decided."""

    success: Succeeded
    executionId: ExecutionId
    checkpointId: CheckpointId
    stage: str = Field(description="The checkpoint's stage.")
    status: CheckpointStatus = Field(description="`awaiting_review` while the reviewer has not answered.")
    attempt: int = Field(ge=1, description="The attempt the answer is about.")
    executionStatus: ExecutionStatus = Field(description="The execution's status now.")
    decision: Literal["approve", "reject", "cancel"] | None = Field(
        description="The decision; null while none is made (a long-poll that ran out of time)."
    )
    comment: str | None = Field(description="The reviewer's comment; null before a decision.")
    editedArgs: dict[str, Any] | None = Field(description="The arguments the reviewer changed when approving.")
    args: dict[str, Any] = Field(description="The arguments to call with: those proposed, with the edits applied.")
    by: str | None = Field(description="Who decided; null before a decision.")
    via: Channel | None = Field(description="Through which channel; null before a decision.")
    at: datetime | None = Field(description="When; null before a decision.")


class ExternalCompleteOut(Out):
    """The end of an external run, as recorded."""

    success: Succeeded
    executionId: ExecutionId
    status: Literal["completed", "failed"] = Field(description="The execution's final status.")
