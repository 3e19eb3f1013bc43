"""Bring your own agent (issue 22): an execution created with `agentModel: "external"` is driven over REST by
the caller's own agent, holding a key of the same user (eval:create).

No worker ever claims such an execution (agents/claims.py). The agent sends its events (each with a key of its
own, so a retried batch adds nothing twice), asks at checkpoints (the same pause as the built-in agent:
review/pausing.py), long-polls for the decision, and completes. Another user's execution is a 404, a built-in
one a 409, and a cancelled one answers every call with 409 `execution_cancelled`.
"""

from __future__ import annotations

import time
from typing import Any

import sqlalchemy as sa
from quart import Blueprint, request
from sqlalchemy.ext.asyncio import AsyncSession

from api.auth import Caller, current_caller, owned_execution, require_scope
from api.external_events import as_events
from api.external_schemas import ExternalCheckpointIn, ExternalCompleteIn, ExternalEventsIn
from api.problems import ApiError, not_found
from api.schemas import parse_body
from api.tasks import json_body
from core.backends import backend_of
from core.bus import Bus, execution_channel
from core.db import Database
from core.errors import FailureCode, failure
from core.events import append_event, append_events
from core.formatting import isoformat
from core.ids import new_id
from core.model_profiles import EXTERNAL
from core.models import Checkpoint, Execution, ExternalKey, utcnow
from core.settings import Settings
from core.vocabulary import FINAL, Channel, EventType
from core.web.services import close_request_session, db_session, services
from review import decide
from review.decision_records import decision_for
from review.pausing import pause_for_review

blueprint = Blueprint("external", __name__, url_prefix="/api/eval/executions")

MAX_WAIT_SECONDS = 60


def _refused(execution: Execution) -> ApiError | None:
    if execution.agent_model != EXTERNAL:
        return ApiError(
            409, "not_external", f"execution {execution.id} is run by the built-in agent ({execution.agent_model})"
        )
    if execution.status == "cancelled":
        return ApiError(409, "execution_cancelled", f"execution {execution.id} was cancelled; stop working on it")
    if execution.status in FINAL:
        return ApiError(409, "execution_finished", f"execution {execution.id} is {execution.status}")
    return None


async def running_external(session: AsyncSession, execution_id: str, caller: Caller) -> Execution:
    """The caller's external execution, still under way (locked against a concurrent cancel on PostgreSQL)."""
    await owned_execution(session, execution_id, caller)
    execution = await session.scalar(
        sa.select(Execution).where(Execution.id == execution_id).with_for_update().execution_options(
            populate_existing=True
        )
    )
    assert execution is not None
    refused = _refused(execution)
    if refused is not None:
        raise refused
    return execution


async def _start(session: AsyncSession, execution: Execution) -> None:
    """The agent's first call starts the run, as a worker's claim starts a built-in one."""
    if execution.status != "queued":
        return
    now = utcnow()
    execution.status, execution.started_at = "running", now
    await session.flush()
    await append_event(session, execution.id, EventType.EXECUTION_STARTED, {"agent": EXTERNAL})


async def _new_keys(session: AsyncSession, execution_id: str, keys: list[str], kind: str) -> set[str]:
    """Of `keys`, those seen for the first time (now recorded); a concurrent retry's keys are not new."""
    if not keys:
        return set()
    insert = backend_of(session).insert(ExternalKey.__table__)
    rows = [{"execution_id": execution_id, "key": key, "kind": kind, "ref": "", "created_at": utcnow()} for key in keys]
    added = await session.execute(
        insert.values(rows).on_conflict_do_nothing().returning(ExternalKey.__table__.c.key)
    )
    return set(added.scalars())


async def add_events(
    session: AsyncSession, settings: Settings, execution: Execution, body: ExternalEventsIn
) -> dict[str, Any]:
    """Add the agent's events; an event whose key was seen before is skipped (a retried batch).

    The one way in for events: the REST route below and the MCP tool `report_progress` (api/mcp_server.py)."""
    execution_id = execution.id
    keys = [event.key for event in body.events]
    if len(set(keys)) != len(keys):
        raise ApiError(422, "validation_failed", "events: two events share a key; each needs its own")
    await _start(session, execution)
    new = await _new_keys(session, execution_id, keys, "event")
    items = [item for event in body.events if event.key in new for item in as_events(settings, event)]
    if items:
        added = await append_events(session, execution_id, items)
        assert added is not None
        seqs = {event.payload["key"]: event.seq for event in added if "key" in event.payload}
        for key, seq in seqs.items():
            await session.execute(
                sa.update(ExternalKey)
                .where(ExternalKey.execution_id == execution_id, ExternalKey.key == key)
                .values(ref=str(seq))
            )
    recorded = await session.execute(
        sa.select(ExternalKey.key, ExternalKey.ref).where(
            ExternalKey.execution_id == execution_id, ExternalKey.key.in_(keys)
        )
    )
    known: dict[str, str] = {key: ref for key, ref in recorded.all()}
    return {
        "success": True,
        "executionId": execution_id,
        "events": [
            {"key": key, "seq": int(known[key]) if known.get(key) else None, "duplicate": key not in new}
            for key in keys
        ],
    }


@blueprint.post("/<execution_id>/events")
@require_scope("eval:create")
async def post_events(execution_id: str) -> tuple[dict[str, Any], int]:
    """Add the agent's events; an event whose key was seen before is skipped (a retried batch)."""
    session = db_session()
    execution = await running_external(session, execution_id, current_caller())
    body = parse_body(ExternalEventsIn, await json_body())
    return await add_events(session, services().settings, execution, body), 200


async def _checkpoint_answer(session: AsyncSession, checkpoint: Checkpoint) -> dict[str, Any]:
    """The checkpoint's state and, unless it waits now, its latest decision (None while none is made)."""
    execution_status = await session.scalar(sa.select(Execution.status).where(Execution.id == checkpoint.execution_id))
    record = None if checkpoint.status in ("awaiting_review",) else await decision_for(session, checkpoint.id)
    proposed = dict((checkpoint.next_action or {}).get("args") or {})
    answer: dict[str, Any] = {
        "success": True,
        "executionId": checkpoint.execution_id,
        "checkpointId": checkpoint.id,
        "stage": checkpoint.stage,
        "status": checkpoint.status,
        "attempt": checkpoint.attempt,
        "executionStatus": execution_status,
        "decision": None,
        "comment": None,
        "editedArgs": None,
        "args": proposed,
        "by": None,
        "via": None,
        "at": None,
    }
    if record is not None:
        answer.update(
            decision=record.decision,
            comment=record.comment,
            editedArgs=record.edited_args,
            args={**proposed, **(record.edited_args or {})},
            by=record.by,
            via=record.via,
            at=isoformat(record.at),
            attempt=record.attempt,
        )
    return answer


async def ask_checkpoint(
    session: AsyncSession, settings: Settings, execution: Execution, body: ExternalCheckpointIn
) -> tuple[dict[str, Any], int]:
    """Pause for the reviewer before `nextAction`; the same key again answers with the same checkpoint (200,
    201 when new). The one way in for checkpoints: the REST route and the MCP tool `request_approval`."""
    execution_id = execution.id
    seen = await session.scalar(
        sa.select(ExternalKey.ref).where(ExternalKey.execution_id == execution_id, ExternalKey.key == body.key)
    )
    if seen is not None:
        return await _checkpoint_answer(session, await session.get_one(Checkpoint, seen)), 200
    if execution.status == "awaiting_review":
        raise ApiError(409, "awaiting_review", "a checkpoint of this execution waits for its reviewer already")
    without_verification = execution.test_mode == "without-verification"
    if not without_verification and execution.assigned_reviewer is None:
        raise ApiError(
            409, "no_reviewer", "this execution has no assignedReviewer to ask; PATCH one before a checkpoint"
        )
    await _start(session, execution)
    # A checkpoint of the same stage still to be reached (the caller's, or one sent back to revise) is this one.
    checkpoint = await session.scalar(
        sa.select(Checkpoint)
        .where(Checkpoint.execution_id == execution_id, Checkpoint.stage == body.stage, Checkpoint.status == "pending")
        .order_by(Checkpoint.position)
        .limit(1)
    )
    if checkpoint is None:
        last = await session.scalar(
            sa.select(sa.func.max(Checkpoint.position)).where(Checkpoint.execution_id == execution_id)
        )
        checkpoint = Checkpoint(
            id=new_id("chk"),
            execution_id=execution_id,
            position=(last if last is not None else -1) + 1,
            stage=body.stage,
            description=body.description,
            verification_question=body.verificationQuestion,
            origin="agent",
            status="pending",
            attempt=1,
        )
        session.add(checkpoint)
    else:
        if body.description:
            checkpoint.description = body.description
        checkpoint.verification_question = body.verificationQuestion
    await session.flush()
    if not await _new_keys(session, execution_id, [body.key], "checkpoint"):
        raise ApiError(409, "conflict", "a request with this key is being handled; send it again")
    await session.execute(
        sa.update(ExternalKey)
        .where(ExternalKey.execution_id == execution_id, ExternalKey.key == body.key)
        .values(ref=checkpoint.id)
    )
    action = body.nextAction
    next_action = {
        "tool": action.tool if action else "continue",  # no call gated: the agent just goes on
        "args": action.args if action else {},
        "instruction": body.description,
        "toolCallId": None,
        # The reviewer may edit an external tool's arguments: the agent's own code checks them (review.decide).
        "editable": bool(action and action.args),
        "external": True,
    }
    if without_verification:
        checkpoint.next_action = next_action
        await decide(session, checkpoint.id, "approve", by="vouch", via=Channel.AUTO)
        await session.refresh(checkpoint)
        return await _checkpoint_answer(session, checkpoint), 201
    await pause_for_review(session, settings, execution_id, checkpoint, next_action)
    await session.flush()
    return await _checkpoint_answer(session, checkpoint), 201


@blueprint.post("/<execution_id>/checkpoints")
@require_scope("eval:create")
async def post_checkpoint(execution_id: str) -> tuple[dict[str, Any], int]:
    """Pause for the reviewer before `nextAction`; the same key again answers with the same checkpoint."""
    session = db_session()
    execution = await running_external(session, execution_id, current_caller())
    body = parse_body(ExternalCheckpointIn, await json_body())
    return await ask_checkpoint(session, services().settings, execution, body)


async def _read_checkpoint(db: Database, execution_id: str, checkpoint_id: str) -> dict[str, Any] | None:
    async with db.reading() as session:
        checkpoint = await session.get(Checkpoint, checkpoint_id)
        if checkpoint is None or checkpoint.execution_id != execution_id:
            return None
        return await _checkpoint_answer(session, checkpoint)


async def wait_for_decision(
    db: Database, bus: Bus, execution_id: str, checkpoint_id: str, wait: float | None
) -> dict[str, Any]:
    """The checkpoint's answer once decided on any channel, the run ended, or `wait` seconds passed (None: no
    limit). The caller has checked the execution is its own; no transaction is held while waiting."""
    deadline = None if wait is None else time.monotonic() + wait
    # Subscribed before the first read: a decision committed in between is then both read and heard.
    async with bus.subscribe(execution_channel(execution_id)) as heard:
        while True:
            answer = await _read_checkpoint(db, execution_id, checkpoint_id)
            if answer is None:
                raise not_found("checkpoint")
            if answer["executionStatus"] == "cancelled":
                raise ApiError(409, "execution_cancelled", f"execution {execution_id} was cancelled; stop")
            left = None if deadline is None else deadline - time.monotonic()
            if answer["decision"] is not None or answer["executionStatus"] in FINAL or (left is not None and left <= 0):
                return answer
            await heard.get(timeout=left)  # any event of the execution: look again


async def owned_external(session: AsyncSession, execution_id: str, caller: Caller) -> Execution:
    """The caller's external execution, in whatever state (a long-poll reads a finished one's answer too)."""
    execution = await owned_execution(session, execution_id, caller)
    if execution.agent_model != EXTERNAL:
        raise ApiError(409, "not_external", f"execution {execution_id} is run by the built-in agent")
    return execution


def _wait_seconds() -> float:
    raw = request.args.get("wait", "0")
    try:
        wait = float(raw)
    except ValueError:
        wait = -1.0
    if not 0 <= wait <= MAX_WAIT_SECONDS:
        raise ApiError(
            422,
            "validation_failed",
            f"wait: must be a number of seconds from 0 to {MAX_WAIT_SECONDS}",
            errors=[{"parameter": "wait", "detail": f"must be a number of seconds from 0 to {MAX_WAIT_SECONDS}"}],
        )
    return wait


@blueprint.get("/<execution_id>/checkpoints/<checkpoint_id>")
@require_scope("eval:create")
async def get_checkpoint(execution_id: str, checkpoint_id: str) -> dict[str, Any]:
    """The checkpoint's decision; with `wait=N`, held up to N seconds until one is made on any channel."""
    caller = current_caller()
    wait = _wait_seconds()
    await owned_external(db_session(), execution_id, caller)
    # No transaction held open while waiting: each look reads afresh.
    await close_request_session(None)
    found = services()
    return await wait_for_decision(found.db, found.bus, execution_id, checkpoint_id, wait)


async def finish(session: AsyncSession, execution: Execution, body: ExternalCompleteIn) -> dict[str, Any]:
    """The run's end, told by the agent: `completed` with its result, or `failed` with its error."""
    execution_id = execution.id
    if execution.status == "awaiting_review":
        raise ApiError(409, "awaiting_review", "a checkpoint waits for its reviewer; wait for the decision first")
    await _start(session, execution)
    now = utcnow()
    if body.status == "completed":
        result = dict(body.result or {})
        if "output" not in result and isinstance(result.get("summary"), str):
            # `output` is the agent's final answer (issue 23), what scorers judge: a summary stands in for it.
            result["output"] = result["summary"]
        summary = result.get("output") or result.get("summary")
        if isinstance(summary, str) and summary:
            # The agent's answer is the run's summary, as a built-in run's is: the completion webhook carries it.
            result.setdefault("summary", summary)
        execution.status, execution.completed_at, execution.result = "completed", now, result
        await session.flush()
        if isinstance(summary, str) and summary:
            await append_event(session, execution_id, EventType.AGENT_MESSAGE, {"text": summary})
        await append_event(
            session, execution_id, EventType.EXECUTION_COMPLETED, {"status": "completed", "result": result}
        )
    else:
        error = failure(FailureCode.AGENT_FAILED, body.error or "the external agent reported a failure")
        execution.status, execution.completed_at = "failed", now
        execution.error, execution.error_info = error["detail"], error
        await session.flush()
        await append_event(session, execution_id, EventType.EXECUTION_FAILED, {"status": "failed", "error": error})
    return {"success": True, "executionId": execution_id, "status": execution.status}


@blueprint.post("/<execution_id>/complete")
@require_scope("eval:create")
async def complete(execution_id: str) -> tuple[dict[str, Any], int]:
    """The run's end, told by the agent: `completed` with its result, or `failed` with its error."""
    session = db_session()
    execution = await running_external(session, execution_id, current_caller())
    body = parse_body(ExternalCompleteIn, await json_body())
    return await finish(session, execution, body), 200
