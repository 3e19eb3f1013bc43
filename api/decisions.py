"""Approve or reject a checkpoint over the API: the reviewer's programmatic channel."""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable
from typing import Any, Literal, NamedTuple

import sqlalchemy as sa
from quart import Blueprint, request

from api.auth import current_caller, require_scope
from api.problems import ApiError, not_found
from api.schemas import DecisionIn, GradeIn, parse_body
from api.tasks import json_body
from core._sqlalchemy_shortcuts import DirectStatement, run_direct
from core.db import commits_alone, in_a_transaction_again
from core.models import CHECKPOINTS, EXECUTIONS, Checkpoint, Execution, utcnow
from core.vocabulary import Channel, CheckpointOrigin
from core.web.services import db_session, services
from review import (
    AlreadyDecided,
    DecisionError,
    DecisionRecord,
    InvalidInput,
    NotReviewer,
    UnknownCheckpoint,
    approve_alone,
    decide,
)
from review.access import decider_rule, may_decide

blueprint = Blueprint("decisions", __name__, url_prefix="/api/eval/executions")

# The execution, the checkpoint named if it is one of the execution's, and whether the caller (`by`) may decide
# it: the one rule (review/access.py), asked in the same statement. Sent straight to the driver
# (core/_sqlalchemy_shortcuts.py): plain text and a flag come back.
_DECIDING = DirectStatement(
    sa.select(
        EXECUTIONS.c.user_id,
        EXECUTIONS.c.assigned_reviewer,
        CHECKPOINTS.c.id.label("checkpoint_id"),
        CHECKPOINTS.c.attempt,
        decider_rule(
            sa.bindparam("by", type_=sa.String()),
            EXECUTIONS.c.assigned_reviewer,
            EXECUTIONS.c.backup_reviewer,
            CHECKPOINTS.c.id,
            CHECKPOINTS.c.attempt,
        ).label("may_decide"),
    )
    .select_from(
        EXECUTIONS.outerjoin(
            CHECKPOINTS,
            sa.and_(CHECKPOINTS.c.id == sa.bindparam("checkpoint_id"), CHECKPOINTS.c.execution_id == EXECUTIONS.c.id),
        )
    )
    .where(EXECUTIONS.c.id == sa.bindparam("execution_id"))
)


@blueprint.post("/<execution_id>/checkpoints/<checkpoint_id>/decision")
@require_scope("eval:manage")
async def decide_checkpoint(execution_id: str, checkpoint_id: str) -> tuple[dict[str, Any], int]:
    async def read() -> _Answer:
        body = parse_body(DecisionIn, await json_body())
        return body.decision, body.comment, body.editedArgs, body.rating, body.labels

    return await _decide(execution_id, checkpoint_id, read, first_attempt_alone=True)


@blueprint.post("/<execution_id>/grade")
@require_scope("eval:manage")
async def grade(execution_id: str) -> tuple[dict[str, Any], int]:
    """The `human` scorer's grade (issue 23): the answer to the run's open "Grade the result" checkpoint."""
    session = db_session()
    checkpoint_id = await session.scalar(
        sa.select(Checkpoint.id)
        .where(Checkpoint.execution_id == execution_id, Checkpoint.origin == CheckpointOrigin.GRADE)
        .limit(1)
    )
    if checkpoint_id is None:
        execution = await session.get(Execution, execution_id)
        caller = current_caller()
        if execution is None or (execution.user_id != caller.user_id and execution.assigned_reviewer != caller.email):
            raise not_found("execution")
        raise ApiError(
            409,
            "no_grade_requested",
            "this run has no grade to give: it has no human scorer, or it has not completed yet",
        )

    async def read() -> _Answer:
        body = parse_body(GradeIn, await json_body())
        return "approve" if body.passed else "reject", body.comment, None, body.rating, body.labels

    return await _decide(execution_id, checkpoint_id, read)


class _Deciding(NamedTuple):
    user_id: str
    assigned_reviewer: str | None
    checkpoint_id: str | None
    attempt: int | None
    may_decide: Any  # a boolean, or SQLite's 0 or 1


# decision, comment, editedArgs, rating, labels
_Answer = tuple[Literal["approve", "reject"], str, dict[str, Any] | None, int | None, list[str] | None]


# The attempt a plain approval is first tried at (`first_attempt_alone`): most checkpoints are approved at their first.
FIRST_ATTEMPT = 1


async def _decide(
    execution_id: str,
    checkpoint_id: str,
    read: Callable[[], Awaitable[_Answer]],
    *,
    first_attempt_alone: bool = False,
) -> tuple[dict[str, Any], int]:
    """Decide as the caller, once they are known to be the reviewer: `read` gives the body's answer (told only
    then, so that someone who may not see the execution learns nothing from a 422).

    With `first_attempt_alone`, where statements commit by themselves, a plain approval is first tried at
    FIRST_ATTEMPT as the decision's one statement (review.approve_alone), before anything is read and without
    the request's session: it writes only if the caller may decide that attempt of this checkpoint of this
    execution now. Anything else writes nothing and goes the usual way, which reads who may decide and which
    attempt waits, and answers precisely (issue 25: one round trip where there were two)."""
    caller = current_caller()
    db = services().db
    alone = db.backend.writes_alone
    answer: _Answer | None = None
    refused_body: ApiError | None = None
    if alone and first_attempt_alone:
        try:
            answer = await read()
        except ApiError as refused:
            refused_body = refused  # told once the caller is known to see the execution
        if answer is not None:
            # Refused (a grade out of range), it wrote nothing: the usual way tells why, once it may.
            with contextlib.suppress(DecisionError):
                decided = _as_decided(answer, caller.email)
                record = await approve_alone(db, execution_id, checkpoint_id, FIRST_ATTEMPT, **decided)
                if record is not None:
                    return _decided(execution_id, checkpoint_id, record)
    session = db_session()
    # Where the database can, the read below commits by itself: no BEGIN and no COMMIT (issue 25). A decision
    # taken in the session goes back to a transaction first.
    alone = alone and await commits_alone(session)
    # One Core statement for the execution, this checkpoint of it and the rule (issue 25: each was a statement).
    parameters = {"execution_id": execution_id, "checkpoint_id": checkpoint_id, "by": caller.email}
    rows = await run_direct(session, lambda cursor: cursor.execute(_DECIDING, parameters))
    found = _Deciding(*rows[0]) if rows else None
    if found is None:
        is_reviewer = False
    elif found.checkpoint_id is not None:
        is_reviewer = bool(found.may_decide)
    else:
        # No such checkpoint of this execution: the rule as it answers for whichever checkpoint waits now.
        execution = await session.get_one(Execution, execution_id)
        is_reviewer = await may_decide(session, execution, None, caller.email, utcnow())
    if found is None or not (is_reviewer or found.user_id == caller.user_id):
        raise not_found("execution")
    if found.checkpoint_id is None:
        raise not_found("checkpoint")
    if not is_reviewer:
        raise ApiError(
            403,
            "not_assigned_reviewer",
            f"only the assigned reviewer ({found.assigned_reviewer}) may decide",
        )
    if refused_body is not None:
        raise refused_body
    if answer is None:
        answer = await read()
    try:
        decided = _as_decided(answer, caller.email)
        record = None
        if alone and found.attempt is not None:
            record = await approve_alone(db, execution_id, checkpoint_id, found.attempt, **decided)
        if record is None:
            if alone:
                await in_a_transaction_again(session)
            record = await decide(session, checkpoint_id, **decided)
    except InvalidInput as exc:
        # A reject without a comment, an edit of a rejection, an argument the tool would refuse: the field named.
        field = exc.pointer.lstrip("/").replace("/", ".")
        raise ApiError(
            422, "validation_failed", f"{field}: {exc.detail}", errors=[{"pointer": exc.pointer, "detail": exc.detail}]
        ) from None
    except NotReviewer:
        # A PATCH named another reviewer since the check above: decide() checked again on the locked row.
        assigned = sa.select(EXECUTIONS.c.assigned_reviewer).where(EXECUTIONS.c.id == execution_id)
        reviewer = await session.scalar(assigned)
        raise ApiError(403, "not_assigned_reviewer", f"only the assigned reviewer ({reviewer}) may decide") from None
    except AlreadyDecided as exc:
        raise ApiError(
            409,
            exc.code,
            str(exc),
            errors=[{"pointer": "/decision", "detail": str(exc)}],
        ) from None
    except UnknownCheckpoint:
        raise not_found("checkpoint") from None
    except DecisionError as exc:
        raise ApiError(409, exc.code, str(exc)) from None
    return _decided(execution_id, checkpoint_id, record)


def _as_decided(answer: _Answer, by: str) -> dict[str, Any]:
    """The caller's answer, over the API, as `review.decide` and `review.approve_alone` take it."""
    decision, comment, edited_args, rating, labels = answer
    return {
        "decision": decision,
        "by": by,
        "via": Channel.API,
        "comment": comment,
        "remote_addr": request.remote_addr,
        "edited_args": edited_args,
        "rating": rating,
        "labels": labels,
    }


def _decided(execution_id: str, checkpoint_id: str, record: DecisionRecord) -> tuple[dict[str, Any], int]:
    return {
        "success": True,
        "executionId": execution_id,
        "checkpointId": checkpoint_id,
        "decision": record.as_json(),
    }, 200
