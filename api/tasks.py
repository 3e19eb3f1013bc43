"""Create an evaluation task and report its status (spec §4.1, §4.2)."""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa
from quart import Blueprint, Response, request
from sqlalchemy.ext.asyncio import AsyncSession

from agents.offline import MODEL_NAME as OFFLINE_AGENT
from agents.policy import detect_side_effects
from api.auth import Caller, current_caller, require_scope
from api.concurrency import check_creates_serialised, no_free_slot, slot_free
from api.idempotency import idempotent
from api.problems import ApiError
from api.schemas import MODEL_PROFILES, CreateTaskIn, parse_body
from api.status_cache import serve_status
from core._sqlalchemy_shortcuts import DirectStatement, run_direct
from core.backends import Backend, backend_of
from core.bus import WAKE_CHANNEL
from core.db import commits_alone, publish_after_commit
from core.event_payloads import ExecutionCreated, TypedEvent
from core.events import add_numbered_events
from core.ids import new_id
from core.links import chat_url
from core.models import CHECKPOINTS, EXECUTIONS, utcnow
from core.vocabulary import EventType, VerdictState
from core.web.services import db_session, services

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


@dataclass(frozen=True, slots=True)
class CreatedExecution:
    id: str
    # The caller's checkpoints and, with autoDetectCheckpoints, one per side effect the description names.
    checkpoint_count: int


@functools.cache
def _creating(backend: Backend, limited: bool, names: tuple[str, ...]) -> DirectStatement:
    """The new execution's INSERT … RETURNING of columns `names`, built once: parameters as those, plus `key_id` and
    `slot_limit` when `limited` (a free slot is its condition: api/concurrency.py), and those of its
    `execution.created` event, which the backend may insert by the same statement (`create_statement`)."""
    columns = EXECUTIONS.c
    values = sa.select(*(sa.bindparam(name, type_=columns[name].type) for name in names))
    if limited:
        values = values.where(slot_free(backend))
    return backend.create_statement(sa.insert(EXECUTIONS).from_select(names, values).returning(columns.id))


async def create_execution(
    session: AsyncSession, caller: Caller, task: CreateTaskIn, agent_model: str, *, concurrency_limit: int | None = None
) -> CreatedExecution:
    """Insert a queued execution; with `concurrency_limit`, refuse (429) when the key has that many in progress."""
    limited = concurrency_limit is not None
    if limited:
        check_creates_serialised(session)
    now = utcnow()
    row: dict[str, Any] = dict(
        id=new_id("exe"),
        user_id=caller.user_id,
        api_key_id=caller.key_id,
        task_name=task.taskName,
        task_description=task.taskDescription,
        test_mode=task.testMode,
        assigned_reviewer=task.assignedReviewer,
        webhook_url=task.webhookUrl,
        webhook_events=list(task.webhookEvents) if task.webhookEvents else None,
        max_revisions=task.maxRevisions,
        backup_reviewer=task.backupReviewer,
        review_deadline_seconds=task.reviewDeadline,
        on_deadline=task.onDeadline,
        auto_detect_checkpoints=task.autoDetectCheckpoints,
        agent_model=agent_model,
        # The rule-based agent cannot revise from a comment: its rejections end the run (review.decide).
        reads_comments=agent_model != OFFLINE_AGENT,
        status="queued",
        expected=task.expected,
        scorers=task.scorers or None,
        # Scored once the run ends (agents/scoring.py); None: a task without scorers has no verdict.
        verdict_state=VerdictState.PENDING if task.scorers else None,
        created_at=now,
        last_seq=1,  # `execution.created`, below
        lease_epoch=0,
    )
    # The side effects the description names get checkpoints of their own, after the caller's (agents.policy).
    detected = detect_side_effects(task.taskDescription) if task.autoDetectCheckpoints else []
    planned = [(cp.stage, cp.description, cp.verificationQuestion, "caller") for cp in task.checkpoints] + [
        (effect.stage, effect.description, effect.question, "auto") for effect in detected
    ]
    announced: ExecutionCreated = {
        "taskName": task.taskName,
        "taskDescription": task.taskDescription,
        "testMode": task.testMode,
        "assignedReviewer": task.assignedReviewer,
        "checkpointCount": len(planned),
    }
    created: list[TypedEvent] = [(EventType.EXECUTION_CREATED, announced)]
    backend = backend_of(session)
    parameters = {
        **row,
        "key_id": caller.key_id,
        "slot_limit": concurrency_limit,
        "event_type": created[0][0],
        "event_payload": created[0][1],
    }
    if not planned:
        # Where the backend writes the event with the execution, that is the whole create: one statement,
        # committing by itself.
        await commits_alone(session)
    # Built once and sent straight to the driver: the ORM's unit of work, and even Core's execution, cost more
    # than the statement, on the path every create takes (core/_sqlalchemy_shortcuts.py).
    creating = _creating(backend, limited, tuple(row))
    if not await run_direct(session, lambda cursor: cursor.execute(creating, parameters)):
        assert concurrency_limit is not None  # only the slot condition can refuse the row
        raise await no_free_slot(session, caller.key_id, concurrency_limit)
    await add_numbered_events(session, row["id"], 1, created, now)
    if planned:
        await session.execute(
            sa.insert(CHECKPOINTS),
            [
                {
                    "id": new_id("chk"),
                    "execution_id": row["id"],
                    "position": position,
                    "stage": stage,
                    "description": description,
                    "verification_question": question,
                    "origin": origin,
                    "status": "pending",
                    "attempt": 1,
                }
                for position, (stage, description, question, origin) in enumerate(planned)
            ],
        )
    publish_after_commit(session, WAKE_CHANNEL, {"executionId": row["id"]})
    return CreatedExecution(row["id"], len(planned))


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
