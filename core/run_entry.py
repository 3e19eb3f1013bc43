"""What a run needs to go on after a pause, read by the statement that lets it go on: the claim's (agents/claims.py)
or, for a decision that lets a run go on, the decision's, which hands it to the worker with the wake-up (`Resume`),
so that the worker's claim and the run's first step are one statement (issue 25).

The columns are correlated subqueries on the executions row, returned by an UPDATE … RETURNING: SQLite renders that
clause without table names, so every column a subquery compares is spelled out with its table's name."""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Dialect

from core.model_profiles import OFFLINE
from core.models import CHECKPOINTS, DECISIONS, EXECUTIONS, TOOL_CALLS, ToolCall

# How long a run that a decision lets go on is kept for the worker its wake-up reaches: the decision leaves it a lease
# held by no worker until then. The workers' periodic search for runnable executions passes it by meanwhile
# (agents/claims.py): a search that fell between the decision's commit and its wake-up took the run without the
# wake-up's hint, the slow way, three times as long (bench/README.md, issue 25). A claim by id, as the wake-up's,
# takes it at once; a lost wake-up leaves it to the first search after the window.
WAKE_UP_WINDOW = timedelta(seconds=1)


@dataclass(frozen=True, slots=True)
class OpenCall:
    """A tool call on record and not finished, as the statement that let its run go on found it. Plain values: an ORM
    `ToolCall` took a tenth of a millisecond to make, in the web process, for the wake-up alone (issue 25). `as_orm`
    for a transaction that works on the call."""

    id: str
    execution_id: str
    step_index: int
    tool: str
    args: dict[str, Any]
    provider_call_id: str | None
    proposed_args: dict[str, Any] | None
    status: str
    started_at: datetime

    def as_orm(self) -> ToolCall:
        # Not loaded into any session: the runner's statements write the call's row (agents/tool_calls.py).
        return ToolCall(
            id=self.id,
            execution_id=self.execution_id,
            step_index=self.step_index,
            tool=self.tool,
            args=self.args,
            provider_call_id=self.provider_call_id,
            proposed_args=self.proposed_args,
            status=self.status,
            started_at=self.started_at,
        )


@dataclass(frozen=True)
class StepCall:
    """The call opened for the step at the offline agent's cursor (at its checkpoint, or by a worker that died), as
    the claim found it: `call` is None when the step has none yet."""

    cursor: int
    call: OpenCall | None


@dataclass(frozen=True)
class Entry:
    """What the runner needs to go on: the agent's state (None before the first claim made it), the offline agent's
    plan when kept apart from it (`executions.agent_plan`), and the run's mode."""

    state: dict[str, Any] | None
    plan: list[dict[str, Any]] | None
    test_mode: str
    auto_detect_checkpoints: bool
    # How many of the caller's checkpoints wait to be passed (status pending).
    caller_pending: int
    # The call of the step the run goes on with, when known: None when the state has no cursor (not the offline
    # agent's, or not made yet) or when approvals edited the call's arguments (`take_edits` reads them).
    step_call: StepCall | None = None


def _named(column: sa.Column[Any]) -> sa.ColumnElement[Any]:
    return sa.literal_column(f"{column.table.name}.{column.name}", column.type)


_CALLER_PENDING = (
    sa.select(sa.func.count())
    .select_from(CHECKPOINTS)
    .where(
        _named(CHECKPOINTS.c.execution_id) == _named(EXECUTIONS.c.id),
        _named(CHECKPOINTS.c.status) == "pending",
        _named(CHECKPOINTS.c.origin) == "caller",
    )
    .scalar_subquery()
    .label("caller_pending")
)
_ENTRY_COLUMNS = (
    EXECUTIONS.c.agent_state,
    EXECUTIONS.c.agent_plan,
    EXECUTIONS.c.test_mode,
    EXECUTIONS.c.auto_detect_checkpoints,
)

# The step the offline agent takes next (agents/offline.py keeps it in its state as `cursor`); NULL in any other
# agent's state, which then finds no call below.
_CURSOR = _named(EXECUTIONS.c.agent_state)["cursor"].as_integer()
_AT_CURSOR = (
    _named(TOOL_CALLS.c.execution_id) == _named(EXECUTIONS.c.id),
    _named(TOOL_CALLS.c.step_index) == _CURSOR,
)
# The call opened for that step, if any: after an approval, the call it let through. A scalar subquery per column:
# SQLite's UPDATE … RETURNING can join nothing, and each is one lookup in the (execution_id, step_index) key. A call
# at the cursor is never finished (its record saves the step's progress with it): no result, error or finish time.
# In the order `entry_of` reads them.
_STEP_CALL_COLUMNS = (
    TOOL_CALLS.c.id,
    TOOL_CALLS.c.tool,
    TOOL_CALLS.c.args,
    TOOL_CALLS.c.provider_call_id,
    TOOL_CALLS.c.proposed_args,
    TOOL_CALLS.c.status,
    TOOL_CALLS.c.started_at,
)
_STEP_CALL = tuple(
    sa.select(column).where(*_AT_CURSOR).scalar_subquery().label(f"step_call_{column.name}")
    for column in _STEP_CALL_COLUMNS
)
# Whether an approval edited that call's arguments: then `take_edits` reads the edits with the call.
_STEP_EDITED = (
    sa.exists()
    .select_from(DECISIONS, CHECKPOINTS, TOOL_CALLS)
    .where(
        # The execution first: its (execution_id, position) key is the index this lookup runs on.
        _named(CHECKPOINTS.c.execution_id) == _named(EXECUTIONS.c.id),
        _named(CHECKPOINTS.c.tool_call_id) == _named(TOOL_CALLS.c.id),
        _named(DECISIONS.c.checkpoint_id) == _named(CHECKPOINTS.c.id),
        _named(DECISIONS.c.attempt) == _named(CHECKPOINTS.c.attempt),
        _named(DECISIONS.c.decision) == "approve",
        # A decision without edits may hold JSON null rather than SQL NULL (as `take_edits` knows): not an edit.
        sa.cast(_named(DECISIONS.c.edited_args), sa.Text()) != "null",
        *_AT_CURSOR,
    )
    .label("step_edited")
)
# The columns of a RETURNING on the executions row that make an `Entry` (`entry_of`).
ENTRY_RETURNING: tuple[sa.ColumnElement[Any], ...] = (*_ENTRY_COLUMNS, _CALLER_PENDING, _STEP_EDITED, *_STEP_CALL)
# The same for the offline agent only: another agent's state (a model's whole conversation) comes back as NULL.
OFFLINE_ENTRY_RETURNING: tuple[sa.ColumnElement[Any], ...] = (
    sa.case((_named(EXECUTIONS.c.agent_model) == OFFLINE, _named(EXECUTIONS.c.agent_state))).label("offline_state"),
    *ENTRY_RETURNING[1:],
)
_RETURNED = (*_ENTRY_COLUMNS, _CALLER_PENDING, _STEP_EDITED, *_STEP_CALL_COLUMNS)


@functools.cache
def _processors(dialect: Dialect) -> tuple[Callable[[Any], Any] | None, ...]:
    """The result processors SQLAlchemy would apply to the returned columns (JSON, booleans, aware datetimes): these
    rows come from the driver directly (core/_sqlalchemy_shortcuts.py)."""
    return tuple(column.type.dialect_impl(dialect).result_processor(dialect, None) for column in _RETURNED)


def entry_of(dialect: Dialect, execution_id: str, raw: tuple[Any, ...]) -> Entry:
    """The `Entry` from the values of `ENTRY_RETURNING` (or `OFFLINE_ENTRY_RETURNING`), as the driver gave them."""
    stored, plan, test_mode, auto, caller_pending, edited, *call = (
        value if process is None or value is None else process(value)
        for process, value in zip(_processors(dialect), raw, strict=True)
    )
    state = None if stored is None else dict(stored)
    cursor = None if state is None else state.get("cursor")
    step_call = None
    if isinstance(cursor, int) and not edited:
        found = None
        if call[0] is not None:
            call_id, tool, args, provider_call_id, proposed_args, status, started_at = call
            found = OpenCall(
                call_id, execution_id, cursor, tool, args, provider_call_id, proposed_args, status, started_at
            )
        step_call = StepCall(cursor, found)
    return Entry(state, None if plan is None else list(plan), test_mode, bool(auto), int(caller_pending), step_call)


@dataclass(frozen=True)
class Resume:
    """A run let go on by a decision, as the decision's statement left it: the lease epoch and last seq it saw and
    what the run needs to go on. Carried by the wake-up: a worker claims the run and takes its step in one statement
    that holds only while the row still has that epoch and seq (agents/claims.py `taking_over`)."""

    epoch: int
    seq: int
    entry: Entry

    def as_json(self) -> dict[str, Any]:
        entry, step = self.entry, self.entry.step_call
        call = None if step is None or step.call is None else step.call
        return {
            "epoch": self.epoch,
            "seq": self.seq,
            "state": entry.state,
            "plan": entry.plan,
            "testMode": entry.test_mode,
            "gateActions": entry.auto_detect_checkpoints,
            "callerPending": entry.caller_pending,
            "cursor": None if step is None else step.cursor,
            "call": None
            if call is None
            else {
                "id": call.id,
                "tool": call.tool,
                "args": call.args,
                "providerCallId": call.provider_call_id,
                "proposedArgs": call.proposed_args,
                "status": call.status,
                "startedAt": call.started_at.isoformat(),
            },
        }

    @classmethod
    def from_json(cls, execution_id: str, data: Any) -> Resume | None:
        """The hint a wake-up carried; None when it carries none, or not in this form (a worker of another version)."""
        if not isinstance(data, dict):
            return None
        try:
            step = None
            cursor = data["cursor"]
            if isinstance(cursor, int):
                found = data["call"]
                call = None
                if found is not None:
                    call = OpenCall(
                        found["id"],
                        execution_id,
                        cursor,
                        found["tool"],
                        found["args"],
                        found["providerCallId"],
                        found["proposedArgs"],
                        found["status"],
                        datetime.fromisoformat(found["startedAt"]),
                    )
                step = StepCall(cursor, call)
            state, plan = data["state"], data["plan"]
            entry = Entry(
                dict(state) if isinstance(state, dict) else None,
                list(plan) if isinstance(plan, list) else None,
                str(data["testMode"]),
                bool(data["gateActions"]),
                int(data["callerPending"]),
                step,
            )
            return cls(int(data["epoch"]), int(data["seq"]), entry)
        except (KeyError, TypeError, ValueError):
            return None
