"""The Python client of the Vouch API: sync `Client`, asyncio `AsyncClient`, typed models, errors, webhooks.

    from vouch_client import Client

    with Client("http://127.0.0.1:8000", "svc_eval_…") as vouch:
        created = vouch.create_task({"taskName": "…", "taskDescription": "…", "testMode": "without-verification"})
        final = vouch.wait(created.executionId, timeout=600)
        print(final.status, final.metrics.steps)

It imports nothing of the server (no Quart, no database): `pip install ./vouch-client` installs it alone.
"""

from vouch_client.aio import AsyncClient
from vouch_client.calls import RetryPolicy
from vouch_client.errors import (
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
from vouch_client.external import AsyncExternalRun, ExternalRun, Rejected
from vouch_client.external_calls import CheckpointDecision
from vouch_client.models import (
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
    Score,
    StatusRecord,
    TaskSpec,
    Verdict,
)
from vouch_client.suite_calls import SuiteExport
from vouch_client.suite_models import (
    CreatedSuite,
    ModelResult,
    Suite,
    SuitePage,
    SuiteProgress,
    SuiteRun,
    SuiteRunPage,
    SuiteSpec,
    SuiteSummary,
)
from vouch_client.sync import Client
from vouch_client.webhooks import WebhookVerificationError, verify_webhook

__all__ = [
    "FINAL_STATUSES",
    "ApiError",
    "AsyncClient",
    "AsyncExternalRun",
    "BadRequest",
    "CheckpointDecision",
    "CheckpointSpec",
    "CheckpointState",
    "Client",
    "Conflict",
    "CreatedSuite",
    "CreatedTask",
    "Decision",
    "DecisionAnswer",
    "Event",
    "ExecutionPage",
    "ExecutionPatch",
    "ExecutionSummary",
    "ExternalRun",
    "FieldError",
    "Metrics",
    "ModelResult",
    "NotFound",
    "PermissionDenied",
    "Problem",
    "RateLimited",
    "Rejected",
    "RetryPolicy",
    "Score",
    "ServerError",
    "StatusRecord",
    "StreamError",
    "Suite",
    "SuiteExport",
    "SuitePage",
    "SuiteProgress",
    "SuiteRun",
    "SuiteRunPage",
    "SuiteSpec",
    "SuiteSummary",
    "TaskSpec",
    "TransportError",
    "Unauthorized",
    "ValidationFailed",
    "Verdict",
    "VouchError",
    "WaitTimeout",
    "WebhookVerificationError",
    "verify_webhook",
]
