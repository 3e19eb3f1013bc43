"""Create an evaluation task and report its status (spec §4.1, §4.2)."""

from __future__ import annotations

from typing import Any

from quart import Blueprint, Response, request
from sqlalchemy.ext.asyncio import AsyncSession

from agents.creating import CreatedExecution, NewTask, insert_execution
from api.auth import Caller, current_caller, require_scope
from api.concurrency import no_free_slot
from api.idempotency import idempotent
from api.problems import ApiError
from api.schemas import MODEL_PROFILES, CreateTaskIn, parse_body
from api.status_cache import serve_status
from core.links import chat_url
from core.web.services import db_session, services
from review.access import ReviewerDisabled

__all__ = ["CreatedExecution", "blueprint", "create_execution", "new_task"]

blueprint = Blueprint("tasks", __name__, url_prefix="/api/eval")


def base_url() -> str:
    configured = services().settings.base_url
    return configured or request.host_url.rstrip("/")


def execution_chat_url(execution_id: str) -> str:
    return chat_url(base_url(), services().settings.secret_key, execution_id)


async def json_body() -> Any:
    if request.mimetype != "application/json":
        raise ApiError(415, "unsupported_media_type", "send the body as Content-Type: application/json")
    try:
        body = await request.get_json(silent=True)
    except (UnicodeDecodeError, RecursionError):  # `silent` covers JSON syntax only: not bad UTF-8 or deep nesting
        body = None
    if body is None:
        raise ApiError(400, "invalid_json", "the request body is not valid JSON")
    return body


def new_task(task: CreateTaskIn) -> NewTask:
    """The create body in the names agents/creating.py takes."""
    return NewTask(
        task_name=task.taskName,
        task_description=task.taskDescription,
        test_mode=task.testMode,
        assigned_reviewer=task.assignedReviewer,
        webhook_url=task.webhookUrl,
        webhook_events=tuple(task.webhookEvents) if task.webhookEvents else None,
        max_revisions=task.maxRevisions,
        backup_reviewer=task.backupReviewer,
        review_deadline=task.reviewDeadline,
        on_deadline=task.onDeadline,
        auto_detect_checkpoints=task.autoDetectCheckpoints,
        expected=task.expected,
        scorers=tuple(task.scorers) if task.scorers else None,
        checkpoints=tuple((cp.stage, cp.description, cp.verificationQuestion) for cp in task.checkpoints),
    )


def disabled_reviewer_problem(error: ReviewerDisabled) -> ApiError:
    """The 422 for a reviewer named who is a disabled account's address."""
    detail = (
        f"{error.email} is the address of an account an operator of this Vouch disabled: it can decide nothing, "
        "so name another reviewer"
    )
    return ApiError(
        422, "validation_failed", f"{error.field}: {detail}", errors=[{"pointer": f"/{error.field}", "detail": detail}]
    )


async def create_execution(
    session: AsyncSession, caller: Caller, task: CreateTaskIn, agent_model: str, *, concurrency_limit: int | None = None
) -> CreatedExecution:
    """Insert a queued execution; with `concurrency_limit`, refuse (429) when the key has that many in progress.
    A reviewer named who is a disabled account's address is refused (422)."""
    try:
        created = await insert_execution(
            session, caller.user_id, caller.key_id, new_task(task), agent_model,
            concurrency_limit=concurrency_limit, check_reviewers=True,
        )  # fmt: skip
    except ReviewerDisabled as error:
        raise disabled_reviewer_problem(error) from None
    if created is None:
        assert concurrency_limit is not None  # only the slot condition can refuse the row
        raise await no_free_slot(session, caller.key_id, concurrency_limit)
    return created


@blueprint.post("/create-task-agent")
@require_scope("eval:create")
@idempotent
async def create_task() -> tuple[dict[str, Any], int, dict[str, str]]:
    settings = services().settings
    task = parse_body(CreateTaskIn, await json_body(), {MODEL_PROFILES: settings.model_profiles})
    execution = await create_execution(
        db_session(),
        current_caller(),
        task,
        task.agentModel or settings.agent_model,
        concurrency_limit=settings.concurrency_limit,
    )
    return (
        {
            "success": True,
            "executionId": execution.id,
            "chatUrl": execution_chat_url(execution.id),
            "checkpointCount": execution.checkpoint_count,
        },
        201,
        {"Location": f"{base_url()}/api/eval/status/{execution.id}"},
    )


@blueprint.get("/status/<execution_id>")
@require_scope("eval:read")
async def status(execution_id: str) -> Response:
    # From this process's status cache when it holds the execution (api/status_cache.py), else the database.
    return await serve_status(execution_id, current_caller(), execution_chat_url)
