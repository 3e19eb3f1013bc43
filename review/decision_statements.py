"""The statements of a decision (review.decide), built once: who may decide, on the row as it stands, and what
the decision writes."""

from __future__ import annotations

import functools
from datetime import datetime

import sqlalchemy as sa

from core._sqlalchemy_shortcuts import DirectStatement
from core.events import seq_allocation
from core.models import CHECKPOINTS, DECISIONS, EXECUTIONS, UTCDateTime
from core.run_entry import OFFLINE_ENTRY_RETURNING, WAKE_UP_WINDOW
from core.sql import equals_by_row
from core.vocabulary import CheckpointOrigin
from core.webhooks import QUIET
from review.access import decider_rule


def lease_held_until(now: datetime) -> datetime:
    """The lease, held by no worker, that a decision letting its run go on leaves it with: the wake-up's window."""
    return now + WAKE_UP_WINDOW


# Whether the deciding person (parameter `by`) may decide this attempt (`checkpoint_id`, `attempt`), on the
# execution's row: the one rule (review/access.py) over its reviewer columns.
RULE_ON_ROW = decider_rule(
    sa.bindparam("by", type_=sa.String()),
    EXECUTIONS.c.assigned_reviewer,
    EXECUTIONS.c.backup_reviewer,
    sa.bindparam("checkpoint_id", type_=sa.String()),
    sa.bindparam("attempt", type_=sa.Integer()),
)


# What a decision that lets its run go on returns for the worker's wake-up (`core.run_entry.Resume`): the lease
# epoch, then what the run needs to go on.
RESUMING = (EXECUTIONS.c.lease_epoch, *OFFLINE_ENTRY_RETURNING)


@functools.cache
def allocation(person: bool, moves: bool, resuming: bool = False) -> DirectStatement:
    """The seqs of a decision's events, taken where the rule lets a `person` decide and, when the answer `moves`
    the execution on, only while it waits for this decision, moving it (parameters `end_status`, `completed_at`,
    `held_until`: `lease_held_until` for a run let go on, else None);
    `resuming`, returning what the wake-up of a run let go on carries (`RESUMING`)."""
    where = [RULE_ON_ROW] if person else []
    if not moves:
        return seq_allocation(*where)
    return seq_allocation(
        *where,
        EXECUTIONS.c.status == "awaiting_review",
        returning=RESUMING if resuming else (),
        status=sa.bindparam("end_status"),
        completed_at=sa.bindparam("completed_at", type_=UTCDateTime()),
        worker_id=None,
        lease_until=sa.bindparam("held_until", type_=UTCDateTime()),
    )


@functools.cache
def compare_and_set(asked: bool, proposed: bool) -> DirectStatement:
    """The checkpoint's status moved `from_status` → `new_status` (at attempt `asked`, when the caller names one),
    handing back its execution, attempt and origin, and with `proposed` its next action."""
    checkpoints = CHECKPOINTS.c
    where = [checkpoints.id == sa.bindparam("checkpoint_id"), checkpoints.status == sa.bindparam("from_status")]
    if asked:
        where.append(checkpoints.attempt == sa.bindparam("asked"))
    against = (checkpoints.origin, *([checkpoints.next_action] if proposed else ()))
    return DirectStatement(
        sa.update(CHECKPOINTS)
        .where(*where)
        .values(status=sa.bindparam("new_status"))
        .returning(checkpoints.execution_id, checkpoints.attempt, *against)
    )


# Why the allocation matched nothing: the execution's status, and whether the rule lets `by` decide.
WHY_NOT = sa.select(EXECUTIONS.c.status, RULE_ON_ROW).where(EXECUTIONS.c.id == sa.bindparam("execution_id"))

# What a rejection's outcome depends on: the execution's revision limit, whether its agent reads comments, and
# how many rejections the checkpoint had before this one.
REVISIONS = sa.select(
    EXECUTIONS.c.max_revisions,
    EXECUTIONS.c.reads_comments,
    sa.select(sa.func.count())
    .where(DECISIONS.c.checkpoint_id == sa.bindparam("checkpoint_id"), DECISIONS.c.decision == "reject")
    .scalar_subquery(),
).where(EXECUTIONS.c.id == sa.bindparam("execution_id"))


# A person's plain approval of an attempt they know of (`attempt`, of `checkpoint_id`, of `execution_id`), as one
# statement that commits by itself (PostgreSQL; review.decide in a session alone): the checkpoint's compare-and-set,
# the execution let go on (returning what its wake-up carries), and, from it, the events and the decision row.
# Its conditions are the other path's, each on the rows as they stand: the checkpoint awaits review at that attempt
# and is not a grade, the execution waits for it, the rule lets `by` decide, and nothing is due with the events
# (no webhook, no verdict awaited: QUIET), as a statement alone writes nothing more.
# Both rows are locked before either is written, and the statement never waits for a lock (SKIP LOCKED): a lock held by
# someone else makes it match nothing, and the caller decides in a transaction as usual. Waiting could deadlock
# with that path, which locks the checkpoint first and the execution second. Locked, the rows cannot change
# between the compare-and-set and the execution's move, so one is written only with the other.
_TAKEN = CHECKPOINTS.alias("taken")
_LOCKED = (
    sa.select(_TAKEN.c.id)
    .join(EXECUTIONS, EXECUTIONS.c.id == _TAKEN.c.execution_id)
    .where(
        _TAKEN.c.id == sa.bindparam("checkpoint_id"),
        _TAKEN.c.execution_id == sa.bindparam("execution_id"),
        _TAKEN.c.attempt == sa.bindparam("attempt"),
        _TAKEN.c.status == "awaiting_review",
        _TAKEN.c.origin != CheckpointOrigin.GRADE.value,
        # The execution is found by its id, whatever the table's statistics say.
        equals_by_row(EXECUTIONS.c.status, "awaiting_review"),
        RULE_ON_ROW,
        QUIET,
    )
    .with_for_update(key_share=True, skip_locked=True)
)
_APPROVED = (
    sa.update(CHECKPOINTS)
    .where(CHECKPOINTS.c.id == _LOCKED.scalar_subquery())
    .values(status="approved")
    .returning(CHECKPOINTS.c.execution_id)
    .cte("approved")
)
# Its parameters name columns of the checkpoints it updates (execution_id, attempt): they fill its conditions only.
APPROVED_ALONE = DirectStatement(
    seq_allocation(
        EXECUTIONS.c.id == _APPROVED.c.execution_id,
        returning=RESUMING,
        status="running",
        completed_at=None,
        worker_id=None,
        lease_until=sa.bindparam("held_until", type_=UTCDateTime()),
    ).statement,
    sets_from_parameters=False,
)
