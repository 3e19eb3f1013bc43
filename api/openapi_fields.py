"""What the response models of the REST API share (api/openapi_models.py and its siblings): the closed base model,
the domain's words repeated as literals, and one description per meaning."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field

# Repeated as literals so that the schema lists them; tests/api/test_openapi.py keeps them in step with the code.
ExecutionStatus = Literal["queued", "running", "awaiting_review", "completed", "failed", "rejected", "cancelled"]
CheckpointStatus = Literal["pending", "awaiting_review", "approved", "rejected", "auto_approved"]
TestMode = Literal["with-verification", "without-verification"]
Channel = Literal["email", "web", "chat", "api", "auto", "timeout"]


class Out(BaseModel):
    """Closed: `additionalProperties: false`, so a field a view adds without its model fails the contract test."""

    model_config = ConfigDict(extra="forbid")


# One description per meaning, shared by every answer that carries it.
Succeeded = Annotated[Literal[True], Field(description="Always `true` in a success answer.")]
ExecutionId = Annotated[str, Field(description="The execution's id; use it in the status path.")]
CheckpointId = Annotated[str, Field(description="The checkpoint's id; use it in the decision path.")]
TaskName = Annotated[str, Field(description="`taskName` as given at creation.")]
Status = Annotated[ExecutionStatus, Field(description="Where it stands; the last four are final.")]
Mode = Annotated[TestMode, Field(description="`testMode` as given at creation.")]
Reviewer = Annotated[str | None, Field(description="E-mail address of the reviewer; null when none is named.")]
ChatUrl = Annotated[str, Field(description="Live chat view of the execution; it carries a token, so keep it secret.")]
CreatedAt = Annotated[datetime, Field(description="When it was created (UTC, ISO 8601 with milliseconds).")]
CompletedAt = Annotated[datetime | None, Field(description="When it reached a final status; null before.")]
CheckpointCount = Annotated[int, Field(ge=0, description="How many checkpoints it has.")]
