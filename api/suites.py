"""Suites (issue 23, item 3): the same tasks across models, with and without verification, `repeats` times.

POST plans every run as a row and starts what fits in the key's concurrency limit at once; the workers start
the rest as slots free up (agents/suite_scheduler.py), so a suite never answers 429. GET answers the progress
and the per-model results, computed in the database (core/suite_summary.py). Another user's suite is a 404.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from typing import Any

import sqlalchemy as sa
from quart import Blueprint, Response, request
from sqlalchemy.ext.asyncio import AsyncSession

from agents.suite_scheduler import start_pending_runs
from api.auth import Caller, current_caller, require_scope
from api.cursors import Position, decode_cursor, decode_index_cursor, encode_cursor, encode_index_cursor
from api.executions import DEFAULT_LIMIT, MAX_LIMIT, cancel_active
from api.idempotency import idempotent
from api.problems import ApiError, not_found
from api.schemas import MAX_SUITE_RUNS, MODEL_PROFILES, CreateTaskIn, SuiteIn, parse_body
from api.tasks import base_url, disabled_reviewer_problem, execution_chat_url, json_body
from core.db import Database
from core.exports import EXPORT_FORMATS, ExportFormat, ExportRun, suite_export_runs
from core.formatting import isoformat
from core.ids import new_id
from core.models import EXECUTIONS, SUITE_RUNS, SUITE_TASKS, SUITES, Suite, utcnow
from core.suite_summary import Progress, progress_of, run_rows, suite_results
from core.vocabulary import ACTIVE
from core.web.services import db_session, services
from review.access import ReviewerDisabled, disabled_among

blueprint = Blueprint("suites", __name__, url_prefix="/api/eval/suites")

BOTH = "both"
MODES = ("with-verification", "without-verification")
_LIST_PARAMETERS = frozenset({"limit", "cursor"})
_EXPORT_PARAMETERS = frozenset({"format"})
# Sending an export may take longer than Quart's 60 s for one answer (a large Inspect log to a slow reader); past
# this the connection is dropped mid-body, which the reader sees as an incomplete answer, never as a whole file.
EXPORT_SECONDS = 600


def _task_problem(index: int, error: ApiError) -> ApiError:
    """The create's validation problem of task `index`, its fields named as `tasks[index].field`."""
    errors = [{**entry, "pointer": f"/tasks/{index}{entry.get('pointer', '')}"} for entry in (error.errors or [])] or [
        {"pointer": f"/tasks/{index}", "detail": error.detail}
    ]
    first = errors[0]
    field = first["pointer"].removeprefix(f"/tasks/{index}").lstrip("/").replace("/", ".")
    where = f"tasks[{index}]" + (f".{field}" if field else "")
    more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
    return ApiError(error.status, error.code, f"{where}: {first['detail']}{more}", errors=errors)


def _validated_tasks(suite: SuiteIn, profiles: Any) -> list[tuple[dict[str, Any], tuple[str, ...]]]:
    """Each task body as the create validates it, in every mode it will run in; with those modes."""
    validated = []
    for index, body in enumerate(suite.tasks):
        if not isinstance(body, dict):
            raise _task_problem(index, ApiError(422, "validation_failed", "must be a task object, as create takes"))
        if suite.testMode == BOTH:
            modes: tuple[str, ...] = MODES
        elif suite.testMode is not None:
            modes = (suite.testMode,)
        else:
            modes = (str(body.get("testMode", MODES[0])),)
        task: CreateTaskIn | None = None
        for mode in modes:
            try:
                task = parse_body(CreateTaskIn, {**body, "testMode": mode}, {MODEL_PROFILES: profiles})
            except ApiError as error:
                raise _task_problem(index, error) from None
        assert task is not None
        validated.append((task.model_dump(mode="json"), modes))
    return validated


async def _refuse_disabled_reviewers(
    session: AsyncSession, tasks: list[tuple[dict[str, Any], tuple[str, ...]]]
) -> None:
    """Refuse a suite whose tasks name a disabled account's address as a reviewer, as create does (one query)."""
    fields = ("assignedReviewer", "backupReviewer")
    found = await disabled_among(session, {body[field] for body, _ in tasks for field in fields if body.get(field)})
    for index, (body, _) in enumerate(tasks):
        for field in fields:
            if body.get(field) in found:
                raise _task_problem(index, disabled_reviewer_problem(ReviewerDisabled(field, body[field])))


def suite_url(suite_id: str) -> str:
    return f"{base_url()}/suites/{suite_id}"


def suite_status(suite: Suite, progress: Progress) -> tuple[str, Any]:
    """running | completed | cancelled, and when it finished (null while it runs)."""
    if suite.cancelled_at is not None:
        return "cancelled", suite.cancelled_at
    if progress.pending == 0 and progress.active == 0:
        return "completed", progress.last_end or suite.created_at
    return "running", None


async def _owned(session: AsyncSession, suite_id: str, caller: Caller) -> Suite:
    suite = await session.get(Suite, suite_id)
    if suite is None or suite.user_id != caller.user_id:
        raise not_found("suite")
    return suite


@blueprint.post("")
@require_scope("eval:create")
@idempotent
async def create_suite() -> tuple[dict[str, Any], int, dict[str, str]]:
    settings = services().settings
    suite_in = parse_body(SuiteIn, await json_body(), {MODEL_PROFILES: settings.model_profiles})
    tasks = _validated_tasks(suite_in, settings.model_profiles)
    total = sum(len(modes) for _, modes in tasks) * len(suite_in.models) * suite_in.repeats
    if total > MAX_SUITE_RUNS:
        raise ApiError(
            422,
            "suite_too_large",
            f"this suite plans {total} runs (tasks x models x repeats x modes); at most {MAX_SUITE_RUNS} may be "
            "planned in one suite",
        )
    caller, session = current_caller(), db_session()
    await _refuse_disabled_reviewers(session, tasks)
    now = utcnow()
    suite_id = new_id("ste")
    await session.execute(
        sa.insert(SUITES),
        [
            {
                "id": suite_id,
                "user_id": caller.user_id,
                "api_key_id": caller.key_id,
                "name": suite_in.name,
                "test_mode": suite_in.testMode,
                "repeats": suite_in.repeats,
                "models": list(suite_in.models),
                "created_at": now,
            }
        ],
    )
    await session.execute(
        sa.insert(SUITE_TASKS),
        [
            {"suite_id": suite_id, "task_index": index, "task_name": body["taskName"], "body": body}
            for index, (body, _modes) in enumerate(tasks)
        ],
    )
    runs = [
        {"task_index": index, "model": model, "test_mode": mode, "repeat": repeat}
        for repeat in range(1, suite_in.repeats + 1)
        for index, (_body, modes) in enumerate(tasks)
        for model in suite_in.models
        for mode in modes
    ]
    await session.execute(
        sa.insert(SUITE_RUNS),
        [
            {"id": new_id("srn"), "suite_id": suite_id, "position": position, "state": "pending", **run}
            for position, run in enumerate(runs)
        ],
    )
    # What fits starts now, in this transaction; the workers start the rest as slots free up.
    await start_pending_runs(session, caller.key_id, settings.concurrency_limit)
    return (
        {
            "success": True,
            "suiteId": suite_id,
            "name": suite_in.name,
            "status": "running",
            "runs": total,
            "url": suite_url(suite_id),
            "createdAt": isoformat(now),
        },
        201,
        {"Location": f"{base_url()}/api/eval/suites/{suite_id}"},
    )


def _run_json(row: Any) -> dict[str, Any]:
    if row.state != "started":
        status = row.state  # pending | cancelled: never started
    else:
        status = row.status if row.execution_id is not None else "deleted"
    done = row.verdict_state == "done"
    return {
        "executionId": row.execution_id,
        "taskIndex": row.task_index,
        "taskName": row.task_name,
        "model": row.model,
        "testMode": row.test_mode,
        "repeat": row.repeat,
        "status": status,
        "passed": row.verdict_passed if done else None,
        "score": row.verdict_score if done else None,
        "rejects": int(row.rejects),
        "edits": int(row.edits),
        "chatUrl": execution_chat_url(row.execution_id) if row.execution_id else None,
    }


async def suite_record(session: AsyncSession, suite: Suite) -> dict[str, Any]:
    """The suite's record: progress and results per model and mode (its runs are a list of their own: `runs`)."""
    progress = (await progress_of(session, [suite.id]))[suite.id]
    status, finished_at = suite_status(suite, progress)
    by_model = await suite_results(session, suite.id)
    order = {model: index for index, model in enumerate(suite.models)}
    by_model.sort(key=lambda entry: (order.get(entry["model"], len(order)), MODES.index(entry["testMode"])))
    return {
        "success": True,
        "suiteId": suite.id,
        "name": suite.name,
        "status": status,
        "createdAt": isoformat(suite.created_at),
        "finishedAt": isoformat(finished_at),
        "testMode": suite.test_mode,
        "repeats": suite.repeats,
        "models": list(suite.models),
        "progress": progress.json(),
        "byModel": by_model,
    }


async def all_runs(session: AsyncSession, suite_id: str) -> list[dict[str, Any]]:
    """Every run of the suite as the API answers them, in the suite's order (the comparison page draws them all)."""
    return [_run_json(row) for row in await run_rows(session, suite_id)]


@blueprint.get("/<suite_id>")
@require_scope("eval:read")
async def get_suite(suite_id: str) -> dict[str, Any]:
    session = db_session()
    return await suite_record(session, await _owned(session, suite_id, current_caller()))


_RUN_PAGE_DEFAULT = 100
RUN_PAGE_MAX = 500


@blueprint.get("/<suite_id>/runs")
@require_scope("eval:read")
async def list_suite_runs(suite_id: str) -> dict[str, Any]:
    """A page of the suite's runs in the suite's order (the order they start in), pending ones included."""
    limit = _limit(request.args, _RUN_PAGE_DEFAULT, RUN_PAGE_MAX)
    session = db_session()
    suite = await _owned(session, suite_id, current_caller())
    secret_key = services().settings.secret_key
    cursor = request.args.get("cursor")
    after = decode_index_cursor(secret_key, suite.id, cursor) if cursor else -1
    rows = await run_rows(session, suite.id, after=after, limit=limit + 1)
    page, more = rows[:limit], len(rows) > limit
    next_cursor = encode_index_cursor(secret_key, suite.id, page[-1].position) if more else None
    return {"success": True, "suiteId": suite.id, "runs": [_run_json(row) for row in page], "nextCursor": next_cursor}


def _limit(args: Any, default: int, most: int) -> int:
    unknown = sorted(set(args) - _LIST_PARAMETERS)
    if unknown:
        raise _invalid(unknown[0], "unknown query parameter; use limit or cursor")
    raw = args.get("limit")
    if raw is not None and (not raw.isdigit() or not 1 <= int(raw) <= most):
        raise _invalid("limit", f"must be a whole number from 1 to {most}")
    return int(raw) if raw is not None else default


def _invalid(parameter: str, detail: str) -> ApiError:
    return ApiError(
        422, "validation_failed", f"{parameter}: {detail}", errors=[{"parameter": parameter, "detail": detail}]
    )


@blueprint.get("")
@require_scope("eval:read")
async def list_suites() -> dict[str, Any]:
    args = request.args
    limit = _limit(args, DEFAULT_LIMIT, MAX_LIMIT)
    secret_key = services().settings.secret_key
    query = (
        sa.select(Suite)
        .where(Suite.user_id == current_caller().user_id)
        .order_by(Suite.created_at.desc(), Suite.id.desc())
        .limit(limit + 1)
    )
    if cursor := args.get("cursor"):
        after = decode_cursor(secret_key, cursor)
        query = query.where(
            sa.or_(
                Suite.created_at < after.created_at, sa.and_(Suite.created_at == after.created_at, Suite.id < after.id)
            )
        )
    session = db_session()
    found = list(await session.scalars(query))
    page, more = found[:limit], len(found) > limit
    progress = await progress_of(session, [suite.id for suite in page])
    items = []
    for suite in page:
        status, _finished_at = suite_status(suite, progress[suite.id])
        items.append(
            {
                "suiteId": suite.id,
                "name": suite.name,
                "status": status,
                "createdAt": isoformat(suite.created_at),
                "progress": progress[suite.id].json(),
            }
        )
    next_cursor = encode_cursor(secret_key, Position(page[-1].created_at, page[-1].id)) if more else None
    return {"success": True, "suites": items, "nextCursor": next_cursor}


@blueprint.post("/<suite_id>/cancel")
@require_scope("eval:manage")
async def cancel_suite(suite_id: str) -> dict[str, Any]:
    """Pending runs never start; queued, running and waiting ones are cancelled as a cancel of each would."""
    caller, session = current_caller(), db_session()
    suite = await _owned(session, suite_id, caller)
    status, _finished_at = suite_status(suite, (await progress_of(session, [suite_id]))[suite_id])
    if status != "running":
        raise ApiError(409, "suite_finished", f"suite {suite_id} is {status}; only a running suite cancels")
    now = utcnow()
    moved = await session.execute(
        sa.update(SUITES).where(SUITES.c.id == suite_id, SUITES.c.cancelled_at.is_(None)).values(cancelled_at=now)
    )
    if moved.rowcount != 1:  # type: ignore[attr-defined]
        raise ApiError(409, "suite_finished", f"suite {suite_id} is cancelled; only a running suite cancels")
    # First the pending runs (a scheduler holding one waits for this, or this for it), then what has started.
    await session.execute(
        sa.update(SUITE_RUNS)
        .where(SUITE_RUNS.c.suite_id == suite_id, SUITE_RUNS.c.state == "pending")
        .values(state="cancelled")
    )
    in_progress = await session.scalars(
        sa.select(SUITE_RUNS.c.execution_id)
        .join(EXECUTIONS, EXECUTIONS.c.id == SUITE_RUNS.c.execution_id)
        .where(SUITE_RUNS.c.suite_id == suite_id, EXECUTIONS.c.status.in_(ACTIVE))
    )
    for execution_id in list(in_progress):
        await cancel_active(session, execution_id, caller.email)
    await session.refresh(suite)
    return await suite_record(session, suite)


async def _export_body(db: Database, export: ExportFormat, runs: Sequence[ExportRun]) -> AsyncIterator[bytes]:
    # Sent after the request's own session has closed: the rows are read in a session of the body's own.
    async with db.reading() as session:
        async for piece in export.write(session, runs):
            yield piece


@blueprint.get("/<suite_id>/export")
@require_scope("eval:read")
async def export_suite(suite_id: str) -> Response:
    """Every run of the suite, in its order, as JSON Lines, CSV or an Inspect AI eval log (core/exports), sent
    as it is written."""
    args = request.args
    unknown = sorted(set(args) - _EXPORT_PARAMETERS)
    if unknown:
        raise _invalid(unknown[0], "unknown query parameter; use format")
    name = args.get("format", "jsonl")
    export = EXPORT_FORMATS.get(name)
    if export is None:
        raise _invalid("format", f"must be one of {', '.join(EXPORT_FORMATS)}")
    session = db_session()
    suite = await _owned(session, suite_id, current_caller())
    runs = await suite_export_runs(session, suite.id, suite.name)
    response = Response(_export_body(services().db, export, runs), content_type=export.media_type)
    response.headers["Content-Disposition"] = f'attachment; filename="{export.filename(suite.id)}"'
    response.timeout = EXPORT_SECONDS
    return response
