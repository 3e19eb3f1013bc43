"""Creating an execution: the row, its `execution.created` event and its checkpoints, in the caller's session.

Below the API so that a worker can start a suite's planned runs (agents/suite_scheduler.py) the way a create
request starts one (api/tasks.py); the rule-based agent and the side-effect detection it needs live here too.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncSession

from agents.offline import MODEL_NAME as OFFLINE_AGENT
from agents.policy import detect_side_effects
from core._sqlalchemy_shortcuts import DirectStatement, run_direct
from core.backends import Backend, backend_of
from core.bus import WAKE_CHANNEL
from core.db import commits_alone, publish_after_commit
from core.event_payloads import ExecutionCreated, TypedEvent
from core.events import add_numbered_events
from core.ids import new_id
from core.models import CHECKPOINTS, EXECUTIONS, utcnow
from core.vocabulary import ACTIVE, EventType, VerdictState
from review.access import none_disabled, refuse_disabled_reviewers


@dataclass(frozen=True, slots=True)
class NewTask:
    """What a validated create body (api/schemas.py CreateTaskIn) says, in the names of the columns."""

    task_name: str
    task_description: str
    test_mode: str
    assigned_reviewer: str | None = None
    webhook_url: str | None = None
    webhook_events: tuple[str, ...] | None = None
    max_revisions: int = 3
    backup_reviewer: str | None = None
    review_deadline: int | None = None
    on_deadline: str = "reject"
    auto_detect_checkpoints: bool = False
    expected: Any = None
    scorers: tuple[Any, ...] | None = None
    # (stage, description, verification question) of each of the caller's checkpoints
    checkpoints: tuple[tuple[str, str, str], ...] = ()

    @classmethod
    def from_body(cls, body: Mapping[str, Any], *, test_mode: str | None = None) -> NewTask:
        """From a validated create body as JSON (CreateTaskIn.model_dump()), with `test_mode` instead of its own."""
        events = body.get("webhookEvents")
        scorers = body.get("scorers")
        return cls(
            task_name=body["taskName"],
            task_description=body["taskDescription"],
            test_mode=test_mode or body["testMode"],
            assigned_reviewer=body.get("assignedReviewer"),
            webhook_url=body.get("webhookUrl"),
            webhook_events=tuple(events) if events else None,
            max_revisions=body.get("maxRevisions", 3),
            backup_reviewer=body.get("backupReviewer"),
            review_deadline=body.get("reviewDeadline"),
            on_deadline=body.get("onDeadline", "reject"),
            auto_detect_checkpoints=bool(body.get("autoDetectCheckpoints")),
            expected=body.get("expected"),
            scorers=tuple(scorers) if scorers else None,
            checkpoints=tuple(
                (cp["stage"], cp.get("description", ""), cp["verificationQuestion"])
                for cp in body.get("checkpoints", ())
            ),
        )


@dataclass(frozen=True, slots=True)
class CreatedExecution:
    id: str
    # The caller's checkpoints and, with autoDetectCheckpoints, one per side effect the description names.
    checkpoint_count: int


@functools.cache
def _creating(backend: Backend, limited: bool, names: tuple[str, ...], reviewers_checked: bool) -> DirectStatement:
    """The new execution's INSERT … RETURNING of columns `names`, built once: parameters as those, plus `key_id` and
    `slot_limit` when `limited` (a free slot is its condition: api/concurrency.py), and those of its
    `execution.created` event, which the backend may insert by the same statement (`create_statement`). With
    `reviewers_checked`, its reviewers being no disabled accounts' is a condition too."""
    columns = EXECUTIONS.c
    bound = {name: sa.bindparam(name, type_=columns[name].type) for name in names}
    values = sa.select(*bound.values())
    if limited:
        values = values.where(backend.slot_free(ACTIVE))
    if reviewers_checked:
        values = values.where(none_disabled(bound["assigned_reviewer"], bound["backup_reviewer"]))
    return backend.create_statement(sa.insert(EXECUTIONS).from_select(names, values).returning(columns.id))


def check_creates_serialised(session: AsyncSession) -> None:
    """Refuse to count slots where another create of the key could count at the same time."""
    if not backend_of(session).slot_count_serialised(session):
        raise RuntimeError("the execution slot check needs the request's write (BEGIN IMMEDIATE) session")


async def insert_execution(
    session: AsyncSession,
    user_id: str,
    key_id: str | None,
    task: NewTask,
    agent_model: str,
    *,
    concurrency_limit: int | None = None,
    suite_id: str | None = None,
    check_reviewers: bool = False,
) -> CreatedExecution | None:
    """Insert a queued execution; with `concurrency_limit`, only while the key has fewer in progress (None if not).
    With `check_reviewers`, a reviewer named who is a disabled account's address is refused (ReviewerDisabled), by
    the same statement: a caller is told at once rather than their run waiting for nobody."""
    limited = concurrency_limit is not None
    if limited:
        check_creates_serialised(session)
    now = utcnow()
    row: dict[str, Any] = dict(
        id=new_id("exe"),
        user_id=user_id,
        api_key_id=key_id,
        task_name=task.task_name,
        task_description=task.task_description,
        test_mode=task.test_mode,
        assigned_reviewer=task.assigned_reviewer,
        webhook_url=task.webhook_url,
        webhook_events=list(task.webhook_events) if task.webhook_events else None,
        max_revisions=task.max_revisions,
        backup_reviewer=task.backup_reviewer,
        review_deadline_seconds=task.review_deadline,
        on_deadline=task.on_deadline,
        auto_detect_checkpoints=task.auto_detect_checkpoints,
        agent_model=agent_model,
        # The rule-based agent cannot revise from a comment: its rejections end the run (review.decide).
        reads_comments=agent_model != OFFLINE_AGENT,
        status="queued",
        expected=task.expected,
        scorers=list(task.scorers) if task.scorers else None,
        # Scored once the run ends (agents/scoring.py); None: a task without scorers has no verdict.
        verdict_state=VerdictState.PENDING if task.scorers else None,
        created_at=now,
        last_seq=1,  # `execution.created`, below
        lease_epoch=0,
    )
    if suite_id is not None:  # a column of its own only then: the plain create's statement stays as it was
        row["suite_id"] = suite_id
    # The side effects the description names get checkpoints of their own, after the caller's (agents.policy).
    detected = detect_side_effects(task.task_description) if task.auto_detect_checkpoints else []
    planned = [(stage, description, question, "caller") for stage, description, question in task.checkpoints] + [
        (effect.stage, effect.description, effect.question, "auto") for effect in detected
    ]
    announced: ExecutionCreated = {
        "taskName": task.task_name,
        "taskDescription": task.task_description,
        "testMode": task.test_mode,
        "assignedReviewer": task.assigned_reviewer,
        "checkpointCount": len(planned),
    }
    created: list[TypedEvent] = [(EventType.EXECUTION_CREATED, announced)]
    backend = backend_of(session)
    parameters = {
        **row,
        "key_id": key_id,
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
    checked = check_reviewers and (task.assigned_reviewer is not None or task.backup_reviewer is not None)
    creating = _creating(backend, limited, tuple(row), checked)
    if not await run_direct(session, lambda cursor: cursor.execute(creating, parameters)):
        if checked:
            await refuse_disabled_reviewers(
                session, assignedReviewer=task.assigned_reviewer, backupReviewer=task.backup_reviewer
            )
        return None  # otherwise only the slot condition refuses the row
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
