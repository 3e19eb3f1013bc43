"""Managing one's own executions (the eval:manage operations spec §4.2 implies): list, change, cancel, delete.

Every route sees only the caller's own executions; another user's id answers 404 like an unknown one.
State changes are conditional UPDATEs (… WHERE status IN …), so a worker finishing the execution at the
same moment makes the request fail with 409 instead of overwriting a final state.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

import sqlalchemy as sa
from quart import Blueprint, request
from sqlalchemy.ext.asyncio import AsyncSession
from werkzeug.datastructures import MultiDict

from api.auth import current_caller, owned_execution, require_scope
from api.cursors import Position, decode_cursor, encode_cursor
from api.problems import ApiError
from api.schemas import REVIEWER_REQUIRED, ExecutionPatchIn, parse_body, reviewer_required
from api.status import status_record
from api.status_cache import invalidate_status_after_commit
from api.tasks import disabled_reviewer_problem, execution_chat_url, json_body
from core.bus import WAKE_CHANNEL
from core.db import publish_after_commit
from core.event_payloads import ExecutionUpdated
from core.events import append_event
from core.formatting import isoformat
from core.models import Checkpoint, Execution, utcnow
from core.vocabulary import ACTIVE, EXECUTION_STATUSES, FINAL, EventType, ExecutionStatus
from core.web.services import db_session, services
from review.access import ReviewerDisabled, refuse_disabled_reviewers
from review.reassign import reviewer_replaced

blueprint = Blueprint("executions", __name__, url_prefix="/api/eval/executions")

DEFAULT_LIMIT, MAX_LIMIT = 20, 100
_LIST_PARAMETERS = frozenset({"status", "limit", "cursor"})


def _invalid(parameter: str, detail: str) -> ApiError:
    return ApiError(
        422, "validation_failed", f"{parameter}: {detail}", errors=[{"parameter": parameter, "detail": detail}]
    )


def _statuses(args: MultiDict[str, str]) -> list[str]:
    """`status=a,b` and `status=a&status=b` both filter to a or b."""
    wanted = [s.strip() for value in args.getlist("status") for s in value.split(",") if s.strip()]
    unknown = sorted(set(wanted) - set(EXECUTION_STATUSES))
    if unknown:
        raise _invalid("status", f"unknown status {', '.join(unknown)}; one of {', '.join(EXECUTION_STATUSES)}")
    return wanted


def _limit(args: MultiDict[str, str]) -> int:
    raw = args.get("limit")
    if raw is None:
        return DEFAULT_LIMIT
    if not raw.isdigit() or not 1 <= int(raw) <= MAX_LIMIT:
        raise _invalid("limit", f"must be a whole number from 1 to {MAX_LIMIT}")
    return int(raw)


def _list_item(row: sa.Row[Any]) -> dict[str, Any]:
    return {
        "executionId": row.id,
        "taskName": row.task_name,
        "status": row.status,
        "testMode": row.test_mode,
        "assignedReviewer": row.assigned_reviewer,
        "createdAt": isoformat(row.created_at),
        "completedAt": isoformat(row.completed_at),
        "checkpointCount": row.checkpoint_count,
        "chatUrl": execution_chat_url(row.id),
    }


@blueprint.get("")
@require_scope("eval:read")
async def list_executions() -> dict[str, Any]:
    args = request.args
    unknown = sorted(set(args) - _LIST_PARAMETERS)
    if unknown:  # a misspelt filter must not silently list everything
        raise _invalid(unknown[0], "unknown query parameter; use status, limit or cursor")
    statuses, limit = _statuses(args), _limit(args)
    secret_key = services().settings.secret_key
    checkpoint_count = (
        sa.select(sa.func.count())
        .where(Checkpoint.execution_id == Execution.id)
        .correlate(Execution)
        .scalar_subquery()
        .label("checkpoint_count")
    )
    query = (
        sa.select(
            Execution.id,
            Execution.task_name,
            Execution.status,
            Execution.test_mode,
            Execution.assigned_reviewer,
            Execution.created_at,
            Execution.completed_at,
            checkpoint_count,
        )
        .where(Execution.user_id == current_caller().user_id)
        .order_by(Execution.created_at.desc(), Execution.id.desc())
        .limit(limit + 1)
    )
    if statuses:
        query = query.where(Execution.status.in_(statuses))
    if cursor := args.get("cursor"):
        after = decode_cursor(secret_key, cursor)
        query = query.where(
            sa.or_(
                Execution.created_at < after.created_at,
                sa.and_(Execution.created_at == after.created_at, Execution.id < after.id),
            )
        )
    rows = list((await db_session().execute(query)).all())
    page, more = rows[:limit], len(rows) > limit
    next_cursor = encode_cursor(secret_key, Position(page[-1].created_at, page[-1].id)) if more else None
    return {"success": True, "items": [_list_item(row) for row in page], "nextCursor": next_cursor}


def _finished(execution_id: str, status: str, doing: str) -> ApiError:
    return ApiError(409, "execution_finished", f"execution {execution_id} is {status}; {doing}")


def _host(url: str | None) -> str | None:
    # Events are shown in the chat; a webhook URL may carry a secret in its path or query, its host does not.
    return urlsplit(url).hostname if url else None


async def _status_answer(session: AsyncSession, execution: Execution) -> dict[str, Any]:
    await session.refresh(execution)
    return await status_record(session, execution, execution_chat_url(execution.id))


@blueprint.patch("/<execution_id>")
@require_scope("eval:manage")
async def update_execution(execution_id: str) -> dict[str, Any]:
    """Change `assignedReviewer` and/or `webhookUrl` of an execution that has not finished."""
    caller, session = current_caller(), db_session()
    execution = await owned_execution(session, execution_id, caller)
    patch = parse_body(ExecutionPatchIn, await json_body())
    if execution.status in FINAL:
        raise _finished(execution_id, execution.status, "it can no longer be changed")
    changes: dict[str, Any] = {}
    events: list[ExecutionUpdated] = []
    given = patch.model_fields_set
    if "assignedReviewer" in given and patch.assignedReviewer != execution.assigned_reviewer:
        if patch.assignedReviewer is None:
            has_checkpoints = execution.auto_detect_checkpoints or bool(
                await session.scalar(sa.select(sa.func.count()).where(Checkpoint.execution_id == execution_id))
            )
            if reviewer_required(execution.test_mode, has_checkpoints):
                raise ApiError(
                    422,
                    "validation_failed",
                    f"assignedReviewer: {REVIEWER_REQUIRED}",
                    errors=[{"pointer": "/assignedReviewer", "detail": REVIEWER_REQUIRED}],
                )
        else:
            try:
                await refuse_disabled_reviewers(session, assignedReviewer=patch.assignedReviewer)
            except ReviewerDisabled as error:
                raise disabled_reviewer_problem(error) from None
        changes["assigned_reviewer"] = patch.assignedReviewer
        events.append(
            {
                "field": "assignedReviewer",
                "from": execution.assigned_reviewer,
                "to": patch.assignedReviewer,
                "by": caller.email,
            }
        )
    if "webhookUrl" in given and patch.webhookUrl != execution.webhook_url:
        changes["webhook_url"] = patch.webhookUrl
        events.append(
            {
                "field": "webhookUrl",
                "from": _host(execution.webhook_url),
                "to": _host(patch.webhookUrl),
                "by": caller.email,
            }
        )
    if changes:
        # review.decide checks the reviewer on the locked execution row, so a waiting checkpoint is from
        # here on decidable by the new reviewer only, on every channel.
        moved = await session.execute(
            sa.update(Execution).where(Execution.id == execution_id, Execution.status.in_(ACTIVE)).values(**changes),
            execution_options={"synchronize_session": False},
        )
        if moved.rowcount != 1:  # type: ignore[attr-defined]
            await session.refresh(execution)
            raise _finished(execution_id, execution.status, "it can no longer be changed")
        for payload in events:
            await append_event(session, execution_id, EventType.EXECUTION_UPDATED, payload)
        if "assigned_reviewer" in changes:
            await session.refresh(execution)
            await reviewer_replaced(session, services().settings, execution)
    return await _status_answer(session, execution)


async def cancel_active(session: AsyncSession, execution_id: str, by: str) -> bool:
    """Cancel the execution if it is queued, running or awaiting review (a suite's cancel does it for each of its
    runs); whether it was."""
    moved = await session.execute(
        sa.update(Execution)
        .where(Execution.id == execution_id, Execution.status.in_(ACTIVE))
        .values(status=ExecutionStatus.CANCELLED, completed_at=utcnow(), worker_id=None, lease_until=None),
        execution_options={"synchronize_session": False},
    )
    if moved.rowcount != 1:  # type: ignore[attr-defined]
        return False
    await append_event(
        session, execution_id, EventType.EXECUTION_CANCELLED, {"status": ExecutionStatus.CANCELLED, "by": by}
    )
    publish_after_commit(session, WAKE_CHANNEL, {"executionId": execution_id, "cancelled": True})
    return True


@blueprint.post("/<execution_id>/cancel")
@require_scope("eval:manage")
async def cancel_execution(execution_id: str) -> dict[str, Any]:
    """Stop an execution that is queued, running or awaiting review.

    A running worker is told over the bus and stops the agent at once, mid-request or mid-tool; had it
    missed the message, its next step's transaction would refuse (each checks that the execution is
    still `running` under its claim). Checkpoints left waiting stay as they are, and a
    later decision on them is refused (409) because the execution no longer waits.
    """
    caller, session = current_caller(), db_session()
    execution = await owned_execution(session, execution_id, caller)
    if not await cancel_active(session, execution_id, caller.email):
        await session.refresh(execution)
        raise _finished(execution_id, execution.status, "only queued, running or awaiting_review executions cancel")
    return await _status_answer(session, execution)


@blueprint.delete("/<execution_id>")
@require_scope("eval:manage")
async def delete_execution(execution_id: str) -> tuple[str, int]:
    """Delete a finished execution and all its rows (the foreign keys cascade); 204."""
    caller, session = current_caller(), db_session()
    execution = await owned_execution(session, execution_id, caller)
    gone = await session.execute(
        sa.delete(Execution).where(Execution.id == execution_id, Execution.status.in_(FINAL)),
        execution_options={"synchronize_session": False},
    )
    if gone.rowcount != 1:  # type: ignore[attr-defined]
        await session.refresh(execution)
        raise ApiError(
            409,
            "execution_not_finished",
            f"execution {execution_id} is {execution.status}; cancel it first, then delete it",
        )
    session.expunge(execution)
    # Deleting appends no event (the events go with it): cached records are dropped explicitly.
    invalidate_status_after_commit(session, execution_id)
    return "", 204
