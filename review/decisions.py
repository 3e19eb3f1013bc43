"""The one decision function every channel ends in: e-mail, web, chat, API and timers."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

import sqlalchemy as sa
from sqlalchemy.engine import Dialect
from sqlalchemy.ext.asyncio import AsyncSession

from core._sqlalchemy_shortcuts import run_direct
from core.backends.base import Companion
from core.bus import WAKE_CHANNEL
from core.db import Alone, Database, publish_after_commit
from core.event_messages import AddedEvent
from core.event_payloads import (
    CheckpointDecided,
    CheckpointRevisionRequested,
    ExecutionCancelled,
    ExecutionRejected,
    TypedEvent,
)
from core.events import append_alone_returning, append_events_returning
from core.ids import new_id
from core.models import CHECKPOINTS, DECISIONS, Checkpoint, Execution, utcnow
from core.run_entry import Resume, entry_of
from core.vocabulary import CHANNELS, FINAL, PERSON_CHANNELS, Channel, CheckpointOrigin, EventType
from review.decision_errors import (
    AlreadyDecided,
    DecisionError,
    ExecutionNotWaiting,
    InvalidInput,
    NotAwaitingReview,
    NotReviewer,
    UnknownCheckpoint,
)
from review.decision_input import REJECT_NEEDS_COMMENT, checked_edits, checked_grade
from review.decision_records import DecisionRecord, decision_for
from review.decision_statements import (
    APPROVED_ALONE,
    REVISIONS,
    WHY_NOT,
    allocation,
    compare_and_set,
    lease_held_until,
)
from review.grading import grade_given

Verdict = Literal["approve", "reject"]
# "cancel" is the deadline's third policy only (onDeadline=cancel); people approve or reject.
Outcome = Literal["approve", "reject", "cancel"]


def _won(session: AsyncSession, rows: list[tuple[Any, ...]]) -> tuple[Any, ...] | None:
    """The compare-and-set's row, its next action (JSON, from the driver as text) decoded as SQLAlchemy would."""
    if not rows:
        return None
    row = rows[0]
    if len(row) < 4 or row[3] is None:
        return row
    dialect = session.get_bind().dialect
    decode = CHECKPOINTS.c.next_action.type.dialect_impl(dialect).result_processor(dialect, None)
    return (*row[:3], decode(row[3]) if decode is not None else row[3])


def _checked_answer(
    decision: Outcome,
    via: Channel,
    comment: str,
    edited_args: dict[str, Any] | None,
    origin: str | None,
    proposed: dict[str, Any] | None = None,
) -> tuple[bool, dict[str, Any] | None, dict[str, Any] | None]:
    """Whether the checkpoint is a grade, and the proposed and edited arguments of an approval with edits (None,
    None without); InvalidInput when a person rejects without a comment or the edits are not valid."""
    # The worker's automatic passes (the without-verification hot path) never answer a grade.
    grading = via != Channel.AUTO and origin == CheckpointOrigin.GRADE
    if decision == "reject" and via in PERSON_CHANNELS and not comment.strip() and not grading:
        raise InvalidInput("/comment", REJECT_NEEDS_COMMENT)
    if edited_args is None:
        return grading, None, None
    if decision != "approve":
        raise InvalidInput("/editedArgs", "may only come with approve: a rejection changes nothing")
    if not isinstance(edited_args, dict) or not edited_args:
        raise InvalidInput("/editedArgs", "must be an object naming at least one argument")
    original_args, changed = checked_edits(proposed, edited_args)
    if not changed:
        return grading, None, None  # nothing differs: a plain approval
    return grading, original_args, changed


async def decide(
    session: AsyncSession,
    checkpoint_id: str,
    decision: Outcome,
    *,
    by: str,
    via: Channel,
    comment: str = "",
    remote_addr: str | None = None,
    attempt: int | None = None,
    edited_args: dict[str, Any] | None = None,
    rating: Any = None,
    labels: Any = None,
) -> DecisionRecord:
    """Record the first answer to the current attempt of a checkpoint and move its execution on.

    A person's decision (`via` email, web, chat or api) is taken only when `by` may decide this attempt
    now (review/access.py); otherwise NotReviewer. On any DecisionError the caller rolls the transaction back:
    some are raised after the compare-and-set below.

    Compare-and-set on the checkpoint's status (and `attempt`, when the caller answers a known one,
    e.g. an e-mail link): of two concurrent answers exactly one passes; the other gets AlreadyDecided
    naming the winner. `via="auto"` is the worker passing a checkpoint in without-verification mode.

    Approve makes the execution runnable. Reject sends the agent back to revise while the checkpoint's
    rejections stay under the execution's `max_revisions` (the checkpoint returns to pending with the next
    attempt number); the rejection after that ends the execution `rejected`. A deadline's reject or cancel
    (`via="timeout"`) is final: nobody answered, so there is no comment to revise from. A person's rejection
    needs a comment, whatever the channel (InvalidInput `/comment`). An agent that cannot read comments
    (`reads_comments` false: the rule-based one) is not sent back: its rejection ends the run.

    `edited_args` (approve only) changes some of the arguments of the tool call the checkpoint gates; they are
    checked against the tool's schema (InvalidInput naming the argument) and kept, with the proposed ones, in
    the decision. The runner runs the call with them (agents/tool_calls.py, `take_edits`).

    `rating` (1-5) and `labels` are a person's optional grade, kept in the decision (InvalidInput `/rating`,
    `/labels`). A checkpoint of origin `grade` (the `human` scorer's "Grade the result", after the run ended)
    is answered the same way, approve = pass and reject = fail (no comment required), and its answer records
    the run's verdict (review/grading.py) instead of moving the execution.

    A person's plain approval may first be tried as one statement outside any session (`approve_alone`).
    """
    if decision not in ("approve", "reject", "cancel"):
        raise DecisionError(f"decision must be 'approve' or 'reject', not {decision!r}")
    if decision == "cancel" and via != "timeout":
        raise DecisionError("only a deadline cancels; decide 'approve' or 'reject'")
    if via not in CHANNELS:
        raise DecisionError(f"unknown channel {via!r}")
    rating, labels = checked_grade(rating, labels)
    from_status = "pending" if via == "auto" else "awaiting_review"
    new_status = {"approve": "approved", "reject": "rejected", "cancel": "rejected"}[decision]
    if via == "auto":
        new_status = "auto_approved"
    # Core statements on the tables throughout (built once where they can be): a decision is a handful of
    # statements, and the ORM's unit of work around them cost more than the database (issue 25).
    checkpoints = CHECKPOINTS.c
    # What the answer is checked against (the origin: a grade needs no comment; the proposed call: the edits)
    # comes back from the compare-and-set itself: no read before it. An answer refused by those checks raises
    # before anything else is decided, and the caller's rollback undoes the compare-and-set, as for NotReviewer.
    against = (checkpoints.origin, *([checkpoints.next_action] if edited_args is not None else ()))
    swap = compare_and_set(attempt is not None, edited_args is not None)
    swapped = {"checkpoint_id": checkpoint_id, "from_status": from_status, "new_status": new_status, "asked": attempt}
    if attempt is None:
        del swapped["asked"]
    # Sent to the driver as it stands: what the session holds unwritten (a checkpoint the worker made just now and
    # passes at once) is written first, as `Session.execute` would.
    await session.flush()
    won = _won(session, await run_direct(session, lambda cursor: cursor.execute(swap, swapped)))
    if won is None:
        # Lost, or nothing to win: the answer is checked first all the same, so a malformed one is told so
        # whatever the checkpoint's state, as before the compare-and-set.
        found = (await session.execute(sa.select(*against).where(checkpoints.id == checkpoint_id))).first()
        grading, _, _ = _checked_answer(decision, via, comment, edited_args, *(found or (None, None)))
        existing = await decision_for(session, checkpoint_id, attempt)
        if existing is not None:
            raise AlreadyDecided(existing)
        checkpoint = await session.get(Checkpoint, checkpoint_id)
        if checkpoint is None:
            raise UnknownCheckpoint(f"no checkpoint {checkpoint_id}")
        status = await session.scalar(sa.select(Execution.status).where(Execution.id == checkpoint.execution_id))
        if status in FINAL and not grading:
            raise ExecutionNotWaiting(f"the execution is {status}; this checkpoint will not be reached")
        raise NotAwaitingReview("the agent has not reached this checkpoint yet")
    grading, original_args, edited_args = _checked_answer(decision, via, comment, edited_args, *won[2:])
    execution_id, current_attempt = won[0], won[1]
    now = utcnow()
    record, row, events = _answered(
        execution_id, checkpoint_id, current_attempt, decision, by, via, comment, remote_addr, now,
        original_args, edited_args, rating, labels,
    )
    person = via in PERSON_CHANNELS
    # The automatic pass and a grade record the answer only; every other answer moves the execution on.
    moves = via != Channel.AUTO and not grading
    parameters: dict[str, Any] = {"by": by, "checkpoint_id": checkpoint_id, "attempt": current_attempt}
    revise, end_status = False, None
    if moves:
        if decision == "reject" and via != "timeout":
            limit, reads, rejected_before = (
                await session.execute(REVISIONS, {"execution_id": execution_id, "checkpoint_id": checkpoint_id})
            ).one()
            revise = reads and rejected_before + 1 <= (limit or 0)  # this rejection counted
        end_status = {"approve": "running", "reject": "running" if revise else "rejected", "cancel": "cancelled"}[
            decision
        ]
        going_on = end_status == "running"
        parameters.update(
            end_status=end_status,
            completed_at=None if going_on else now,
            held_until=lease_held_until(now) if going_on else None,
        )
        events.extend(_outcome_events(end_status, revise, checkpoint_id, current_attempt, comment, by, via))
    # One statement (on PostgreSQL): the execution moved on, or only its seqs taken, where it still waits and,
    # for a person, where the rule lets them decide on the row as it stands; with it the decision row (the
    # unique (checkpoint_id, attempt) is the database's own guard against a second answer) and the events.
    # A run let go on is handed to the worker with the wake-up, as this statement leaves it: its claim and first step
    # can then be one statement (agents/claims.py `taking_over`), with nothing to read back first.
    resuming = end_status == "running" and not revise
    added = await append_events_returning(
        session,
        execution_id,
        events,
        allocation=allocation(person, moves, resuming),
        parameters=parameters,
        companions=[Companion(DECISIONS, row)],
    )
    if added is None:
        # The caller's transaction rolls back on these errors: the compare-and-set above goes with it.
        status, allowed = (await session.execute(WHY_NOT, {**parameters, "execution_id": execution_id})).one()
        if person and not allowed:
            raise NotReviewer(f"{by} may not decide this checkpoint; only its current reviewer may")
        raise ExecutionNotWaiting(f"the execution is {status}; it no longer waits for this decision")
    if revise:
        # Back to pending under the next attempt number: the agent revises and asks again here.
        await session.execute(
            sa.update(CHECKPOINTS)
            .where(CHECKPOINTS.c.id == checkpoint_id)
            .values(status="pending", attempt=current_attempt + 1)
        )
    if end_status == "running":
        _wake(session, session.get_bind().dialect, execution_id, added if resuming else None)
    if grading:
        await grade_given(session, execution_id, record)
    return record


def _outcome_events(
    end_status: str, revise: bool, checkpoint_id: str, attempt: int, comment: str, by: str, via: Channel
) -> list[TypedEvent]:
    if revise:
        revision: CheckpointRevisionRequested = {
            "checkpointId": checkpoint_id,
            "attempt": attempt,
            "nextAttempt": attempt + 1,
            "comment": comment,
            "by": by,
        }
        return [(EventType.CHECKPOINT_REVISION_REQUESTED, revision)]
    if end_status == "rejected":
        rejected: ExecutionRejected = {
            "status": "rejected",
            "checkpointId": checkpoint_id,
            "comment": comment,
            "by": by,
            "attempt": attempt,
        }
        return [(EventType.EXECUTION_REJECTED, rejected)]
    if end_status == "cancelled":
        cancelled: ExecutionCancelled = {"status": "cancelled", "by": by, "via": via}
        return [(EventType.EXECUTION_CANCELLED, cancelled)]
    return []


async def approve_alone(
    db: Database,
    execution_id: str,
    checkpoint_id: str,
    attempt: int,
    decision: Outcome,
    *,
    by: str,
    via: Channel,
    comment: str = "",
    remote_addr: str | None = None,
    edited_args: dict[str, Any] | None = None,
    rating: Any = None,
    labels: Any = None,
) -> DecisionRecord | None:
    """`decide` for a person's plain approval (no edits) of the `attempt` they were shown, of that execution's
    checkpoint, as one statement that commits by itself outside any session, where the database writes that way
    and no spans are exported (decision_statements.APPROVED_ALONE: no session, no BEGIN, no COMMIT and no
    compare-and-set of its own, issue 25). The statement writes only where `by` may decide that attempt now.

    None, with nothing written, where it is not taken, whatever the reason: `decide` in a transaction then gives
    the answer's precise reason. InvalidInput, with nothing written, for a grade out of range."""
    if not (via in PERSON_CHANNELS and decision == "approve" and edited_args is None):
        return None
    if not db.backend.writes_alone or db.traces:
        return None
    rating, labels = checked_grade(rating, labels)
    now = utcnow()
    record, row, events = _answered(
        execution_id, checkpoint_id, attempt, "approve", by, via, comment, remote_addr, now, None, None,
        rating, labels,
    )
    parameters = {"by": by, "checkpoint_id": checkpoint_id, "attempt": attempt, "held_until": lease_held_until(now)}
    async with db.alone() as alone:
        added = await append_alone_returning(
            alone, execution_id, events, allocation=APPROVED_ALONE, parameters=parameters,
            companions=[Companion(DECISIONS, row)],
        )
        if added is None:
            return None
        _wake(alone, alone.connection.dialect, execution_id, added)
    return record


def _answered(
    execution_id: str,
    checkpoint_id: str,
    attempt: int,
    decision: Outcome,
    by: str,
    via: Channel,
    comment: str,
    remote_addr: str | None,
    now: datetime,
    original_args: dict[str, Any] | None,
    edited_args: dict[str, Any] | None,
    rating: int | None,
    labels: list[str] | None,
) -> tuple[DecisionRecord, dict[str, Any], list[TypedEvent]]:
    """The answer as it is shown, its row, and its event."""
    row: dict[str, Any] = {
        "id": new_id("dec"),
        "checkpoint_id": checkpoint_id,
        "attempt": attempt,
        "execution_id": execution_id,
        "decision": decision,
        "decided_by": by,
        "via": via,
        "comment": comment,
        "remote_addr": remote_addr,
        "decided_at": now,
        "original_args": original_args,
        "edited_args": edited_args,
        "rating": rating,
        "labels": labels,
    }
    record = DecisionRecord(
        checkpoint_id=checkpoint_id,
        decision=decision,
        by=by,
        via=via,
        at=now,
        comment=comment,
        attempt=attempt,
        remote_addr=remote_addr,
        original_args=original_args,
        edited_args=edited_args,
        rating=rating,
        labels=list(labels) if labels is not None else None,
    )
    decided: CheckpointDecided = {"checkpointId": checkpoint_id, **record.as_json()}
    return record, row, [(EventType.CHECKPOINT_DECIDED, decided)]


def _wake(
    session: AsyncSession | Alone,
    dialect: Dialect,
    execution_id: str,
    resumed: tuple[list[AddedEvent], tuple[Any, ...]] | None,
) -> None:
    """After the commit, the wake-up of a run let go on; with what the statement that `resumed` it returned
    (`RESUMING`), the run as it left it, for the worker to take over with its first step."""
    wake: dict[str, Any] = {"executionId": execution_id}
    if resumed is not None:
        added, more = resumed
        epoch, *entry = more
        wake["resume"] = Resume(epoch, added[-1].seq, entry_of(dialect, execution_id, tuple(entry))).as_json()
    publish_after_commit(session, WAKE_CHANNEL, wake)
