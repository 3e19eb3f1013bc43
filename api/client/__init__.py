"""The Python client of the Vouch API: sync `Client`, asyncio `AsyncClient`, typed models, errors, webhooks.

    from api.client import Client

    with Client("http://127.0.0.1:8000", "svc_eval_…") as vouch:
        created = vouch.create_task({"taskName": "…", "taskDescription": "…", "testMode": "without-verification"})
        final = vouch.wait(created.executionId, timeout=600)
        print(final.status, final.metrics.steps)

It imports nothing of the server (no Quart, no database): a caller installs the project and uses only this.
"""

from api.client.aio import AsyncClient
from api.client.calls import RetryPolicy
from api.client.errors import (
    ApiError,
    BadRequest,
    Conflict,
    NotFound,
    PermissionDenied,
    RateLimited,
    ServerError,
    StreamError,
    TransportError,
    Unauthorized,
    ValidationFailed,
    VouchError,
    WaitTimeout,
)
from api.client.models import (
    FINAL_STATUSES,
    CheckpointSpec,
    CheckpointState,
    CreatedTask,
    Decision,
    DecisionAnswer,
    Event,
    ExecutionPage,
    ExecutionPatch,
    ExecutionSummary,
    FieldError,
    Metrics,
    Problem,
    StatusRecord,
    TaskSpec,
)
from api.client.sync import Client
from api.client.webhooks import WebhookVerificationError, verify_webhook

__all__ = [
    "FINAL_STATUSES",
    "ApiError",
    "AsyncClient",
    "BadRequest",
    "CheckpointSpec",
    "CheckpointState",
    "Client",
    "Conflict",
    "CreatedTask",
    "Decision",
    "DecisionAnswer",
    "Event",
    "ExecutionPage",
    "ExecutionPatch",
    "ExecutionSummary",
    "FieldError",
    "Metrics",
    "NotFound",
    "PermissionDenied",
    "Problem",
    "RateLimited",
    "RetryPolicy",
    "ServerError",
    "StatusRecord",
    "StreamError",
    "TaskSpec",
    "TransportError",
    "Unauthorized",
    "ValidationFailed",
    "VouchError",
    "WaitTimeout",
    "WebhookVerificationError",
    "verify_webhook",
]
