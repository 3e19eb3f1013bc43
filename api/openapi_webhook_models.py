"""Response models of an execution's webhook log and its redelivery (the status record's `webhook`)."""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import Field

from api.openapi_fields import CreatedAt, ExecutionId, Out, Succeeded


class WebhookAttemptOut(Out):
    """One HTTP attempt of a webhook delivery."""

    number: int = Field(ge=1, description="1 for the first attempt, then one more per retry.")
    at: datetime = Field(description="When the attempt began.")
    statusCode: int | None = Field(description="The receiver's HTTP status; null when no answer came.")
    latencyMs: int | None = Field(description="Milliseconds from sending to the end of the answer (or the error).")
    response: str | None = Field(description="The first KiB of the answer's body.")
    error: str | None = Field(
        description="Why the attempt failed (a status, timeout, network error or a refused private address); "
        "null on success."
    )


class WebhookDeliveryOut(Out):
    """One webhook message and its attempts; its id is the `webhook-id` header, the same on every retry."""

    webhookId: str = Field(description="The message id, sent as `webhook-id`.")
    type: Literal["execution.completed", "checkpoint.awaiting_review", "checkpoint.decided"] = Field(
        description="The event type in the body."
    )
    status: Literal["pending", "succeeded", "failed"] = Field(
        description="`pending` until a 2xx (`succeeded`), a 410, a refused target or the last retry (`failed`)."
    )
    createdAt: CreatedAt
    nextAttemptAt: datetime | None = Field(description="When the next attempt is due, while pending.")
    finishedAt: datetime | None = Field(description="When it succeeded or was given up.")
    attempts: list[WebhookAttemptOut] = Field(description="Every attempt, oldest first.")


class WebhookLogOut(Out):
    """The execution's webhook and its delivery log."""

    url: str | None = Field(description="`webhookUrl`; null when none was given.")
    deliveries: list[WebhookDeliveryOut] = Field(description="Every delivery, oldest first (redeliveries too).")


class RedeliveryOut(Out):
    """A redelivery queued: a new message (new `webhook-id`) with the completion notification."""

    success: Succeeded
    executionId: ExecutionId
    webhookId: str = Field(description="The new message's id; it shows in the status record's `webhook.deliveries`.")
