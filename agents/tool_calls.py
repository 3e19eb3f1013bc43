"""A tool call's life in the runner: opened (its intent on record), gated, started, run and recorded.

A call whose tool works outside the database takes a transaction before it acts and one after; a call
whose tool works only in the database is one transaction with the rest of its step (`run_in_place`).
Either way the result and the agent's progress commit together.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm.attributes import set_committed_value

from agents import budgets
from agents.call_edits import edit_note
from agents.claims import LeaseLost, fenced_allocation, taking_over
from agents.gates import gate_for_call
from agents.policy import RunMode, describe_call, side_effect_of
from agents.tool_base import InPlaceStep, SingleWrite, Tool, ToolContext, ToolFailed
from agents.tools import TOOLS
from core._sqlalchemy_shortcuts import DirectStatement
from core.db import commits_alone
from core.event_messages import AddedEvent
from core.event_payloads import ExecutionClaimed, ToolCallPayload, ToolResult, TypedEvent
from core.events import Companion, append_event, append_events, append_events_alone
from core.ids import new_id
from core.models import TOOL_CALLS, Checkpoint, ToolCall, utcnow
from core.run_entry import OpenCall
from core.vocabulary import Channel, EventType
from review import decide

if TYPE_CHECKING:
    # A circle for the type checker only: the runner (which imports this module) hands itself to these steps.
    from agents.runner import ExecutionRunner


# A step's seqs, its claim's fence, the lease's renewal and the agent's progress: one statement.
_FENCED_STEP = fenced_allocation(lease_until=sa.bindparam("renewed_until"), agent_state=sa.bindparam("saved_state"))


# Built once: a call's progress on its row, and the approvals' edits of its arguments, in the order given.
_CALL_STARTED = sa.update(TOOL_CALLS).where(TOOL_CALLS.c.id == sa.bindparam("call_id")).values(status="started")
_CALL_FINISHED = (
    sa.update(TOOL_CALLS)
    .where(TOOL_CALLS.c.id == sa.bindparam("call_id"))
    .values(
        status=sa.bindparam("status"),
        # A failed call's result stays SQL NULL, as the ORM wrote it (not JSON null).
        result=sa.bindparam("result", type_=sa.JSON(none_as_null=True)),
        error=sa.bindparam("error"),
        finished_at=sa.bindparam("finished_at"),
    )
)


@dataclass(frozen=True)
class Ending:
    """A run's end, written by the statement that records its last step: `allocation` (the step's, which also ends
    the run, fenced by the claim; it matches no row while a checkpoint waits to be passed), its parameters beside
    the step's, and the events that follow the step's."""

    events: tuple[TypedEvent, ...]
    allocation: DirectStatement
    parameters: dict[str, Any]


# Given the result of the step just performed, the run's end when that step is its last; None when it is not.
EndingOf = Callable[[dict[str, Any]], Awaitable[Ending | None]]


def _call_event(call_id: str, tool: str, args: dict[str, Any]) -> ToolCallPayload:
    return {"toolCallId": call_id, "tool": tool, "args": args, "actsOnWorld": TOOLS[tool].acts_on_world}


def _result_event(
    call_id: str, tool: str, result: dict[str, Any] | None, error: str | None, seconds: float
) -> ToolResult:
    event: ToolResult = {"toolCallId": call_id, "tool": tool, "durationMs": round(seconds * 1000, 3)}
    if error is not None:
        event["error"] = error
    else:
        event["result"] = result
    return event


def _answer(result: dict[str, Any] | None, error: str | None) -> dict[str, Any]:
    """What the agent is told: the result, or {"error": ...} when the tool failed."""
    return {"error": error} if error is not None else (result or {})


async def _record(
    tool: Tool, ctx: ToolContext, args: dict[str, Any], outcome: Any
) -> tuple[dict[str, Any] | None, str | None]:
    try:
        return await tool.record(ctx, args, outcome), None
    except ToolFailed as exc:
        return None, str(exc)


async def open_call(
    runner: ExecutionRunner,
    session: AsyncSession,
    index: int,
    tool: str,
    args: dict[str, Any],
    provider_call_id: str | None = None,
) -> ToolCall:
    """The call's row, made once: its intent is on record before anything is performed."""
    call = await session.scalar(
        sa.select(ToolCall).where(ToolCall.execution_id == runner.execution_id, ToolCall.step_index == index)
    )
    if call is not None:
        return call
    call = ToolCall(
        id=new_id("call"),
        execution_id=runner.execution_id,
        step_index=index,
        tool=tool,
        args=args,
        provider_call_id=provider_call_id,
        status="proposed",
        started_at=utcnow(),
    )
    session.add(call)
    await session.flush()
    await append_event(session, runner.execution_id, EventType.TOOL_CALL, _call_event(call.id, tool, args))
    return call


def ungated(call: ToolCall | OpenCall, mode: RunMode) -> bool:
    """Whether `gate` lets the call through without a checkpoint to look at (it reads and writes nothing then)."""
    tool = TOOLS[call.tool]
    if not mode.gate_actions or not tool.acts_on_world or side_effect_of(call.tool, call.args) is None:
        return True
    # A call that can only fail (its `record` says why) has nothing for a reviewer to approve.
    return tool.argument_problem(call.args) is not None


async def gate(runner: ExecutionRunner, session: AsyncSession, call: ToolCall, mode: RunMode) -> Checkpoint | None:
    """With autoDetectCheckpoints, the checkpoint a call of a tool that acts on the world must pass first;
    None when the call needs no review or has passed it."""
    effect = side_effect_of(call.tool, call.args)
    if effect is None or ungated(call, mode):
        return None
    bound = await session.scalar(
        sa.select(Checkpoint).where(
            Checkpoint.tool_call_id == call.id, Checkpoint.origin == "auto", Checkpoint.stage == effect.stage
        )
    )
    if bound is not None and bound.status in ("approved", "auto_approved"):
        return None  # its edits, if any, were taken before the gates (`take_edits`)
    checkpoint = bound or await gate_for_call(
        session, runner.execution_id, call.id, effect, describe_call(call.tool, call.args)
    )
    if mode.without_verification:
        await decide(session, checkpoint.id, "approve", by="vouch", via=Channel.AUTO)
        return None
    return checkpoint


async def start_call(session: AsyncSession, call: ToolCall) -> None:
    """Mark the call started in the transaction that let it through: its intent is on record before it acts,
    so a worker that finds it started, without a result, knows the outcome is unknown."""
    await session.execute(_CALL_STARTED, {"call_id": call.id})
    # The row says so now: the object is told without being marked changed (no flush of it to follow).
    set_committed_value(call, "status", "started")


async def run_call(
    runner: ExecutionRunner, state: dict[str, Any], call: ToolCall, after: Callable[[dict[str, Any]], None]
) -> dict[str, Any]:
    """Perform a started call and record its result with the agent's progress (`after` updates the state) in one
    transaction. Returns what the agent is told (see `_answer`)."""
    tool = TOOLS[call.tool]
    began = time.perf_counter()
    performed = await _perform(runner, tool, call)
    async with runner.db.transaction() as session:
        answer, _ended = await _finish(runner, session, state, call, (*performed, began), after)
        return answer


async def run_begun_in_place(
    runner: ExecutionRunner,
    session: AsyncSession | None,
    state: dict[str, Any],
    call: ToolCall | OpenCall,
    after: Callable[[dict[str, Any]], None],
    ending: EndingOf | None = None,
) -> bool:
    """A call already on record (opened at its checkpoint, which let it through now) of a tool that works only in
    our database: performed and recorded in the caller's transaction, the one that let it through, as
    `run_in_place` does a fresh call. No "started" state in between: its effect and result commit together.
    With `ending`, the run's end, when it gives one, is written by the step's statement too; says whether it was.
    Without `session`, the tool must have a `single_write` (`alone_in_place`): the statement commits by itself."""
    began = time.perf_counter()
    tool = TOOLS[call.tool]
    write = tool.single_write(runner.execution_id, call.args, utcnow())
    if write is not None:
        # Its effect and its row, finished, go with the step's statement (the step after an approval).
        performed: tuple[Any, str | None, float] = (None, None, began)
    else:
        performed = (*await _perform(runner, tool, call), began)
    return (await _finish(runner, session, state, call, performed, after, write, ending))[1]


async def _perform(runner: ExecutionRunner, tool: Tool, call: ToolCall | OpenCall) -> tuple[Any, str | None]:
    """The tool's outcome, or the error it failed with."""
    try:
        return await tool.perform(runner.settings, call.args, call.started_at), None
    except ToolFailed as exc:
        return None, str(exc)


async def _finish(
    runner: ExecutionRunner,
    session: AsyncSession | None,
    state: dict[str, Any],
    call: ToolCall | OpenCall,
    performed: tuple[Any, str | None, float],
    after: Callable[[dict[str, Any]], None],
    write: SingleWrite | None = None,
    ending: EndingOf | None = None,
) -> tuple[dict[str, Any], bool]:
    """Record a performed call, its row finished, with the agent's progress and the result's event. With `write`
    (the call's whole effect as a row), the effect and the call's row are written by the step's statement. With
    `ending`, the run's end too, when it gives one. Without `session` (`write` then given), each statement commits
    by itself (`append_events_alone`). What the agent is told, and whether the run ended."""
    outcome, error, began = performed
    result: dict[str, Any] | None = None
    companions: tuple[Companion, ...] = ()
    finished_at = utcnow()
    if write is not None:
        result = write.result
        # An upsert on its id, which finds the row opened before: what finishing changes is set, and the columns
        # an insert needs are given as the row holds them (its proposed arguments are left as they are).
        row = {
            "id": call.id,
            "execution_id": call.execution_id,
            "step_index": call.step_index,
            "tool": call.tool,
            "args": call.args,
            "status": "succeeded",
            "result": result,
            "error": None,
            "started_at": call.started_at,
            "finished_at": finished_at,
        }
        companions = (write.row, Companion(TOOL_CALLS, row, ("id",)))
    else:
        if session is None:
            raise ValueError("a call whose effect is not one row is recorded in a session")
        if error is None:
            ctx = ToolContext(session, runner.settings, runner.execution_id, call.id, call.started_at)
            result, error = await _record(TOOLS[call.tool], ctx, call.args, outcome)
        finished = {"status": "failed" if error else "succeeded", "result": result, "error": error}
        await session.execute(_CALL_FINISHED, {"call_id": call.id, **finished, "finished_at": finished_at})
    elapsed = time.perf_counter() - began
    answer = {**_answer(result, error), **edit_note(call)}
    after(answer)
    budgets.spend(state, seconds=elapsed)
    recorded: list[TypedEvent] = [(EventType.TOOL_RESULT, _result_event(call.id, call.tool, result, error, elapsed))]
    parameters = {**runner.fenced(), "saved_state": dict(state)}
    end = None if ending is None or error is not None else await ending(result or {})
    if end is not None:
        # The run's end with its last step: its own allocation, which matches no row while a checkpoint still
        # waits to be passed. The step alone, below, then tells that apart from a claim lost.
        ended = await _append(
            runner, session, [*recorded, *end.events], end.allocation, {**parameters, **end.parameters}, companions
        )
        if ended is not None:
            return answer, True
    # The claim's fence, the lease's renewal, the progress saved and the result's seq: one statement, as in
    # `run_in_place`. A claim lost meanwhile adds nothing, and the transaction (the record too) rolls back.
    if await _append(runner, session, recorded, _FENCED_STEP, parameters, companions) is None:
        raise LeaseLost(runner.execution_id)
    return answer, False


async def _append(
    runner: ExecutionRunner,
    session: AsyncSession | None,
    events: Sequence[TypedEvent],
    allocation: DirectStatement,
    parameters: dict[str, Any],
    companions: Sequence[Companion],
) -> list[AddedEvent] | None:
    """A step's events with its allocation and companions: in `session`, or, without one, in a statement of their
    own that commits by itself. For a claim still to be taken over (`Claim.resume`), the statement claims the row
    too, and the claim's event comes before the step's."""
    claim = runner.claim
    if claim.resume is not None:
        allocation, taking = taking_over(allocation, claim)
        resumed: ExecutionClaimed = {"worker": runner.worker_id}
        events, parameters = [(EventType.EXECUTION_RESUMED, resumed), *events], {**parameters, **taking}
    execution_id = runner.execution_id
    if session is None:
        added = await append_events_alone(
            runner.db, execution_id, events, allocation=allocation, parameters=parameters, companions=companions
        )
    else:
        added = await append_events(
            session, execution_id, events, allocation=allocation, parameters=parameters, companions=companions
        )
    if added is not None and claim.resume is not None:
        runner.claim = claim.taken()
    return added


def alone_in_place(tool: str, args: dict[str, Any]) -> bool:
    """Whether a call of `tool` with `args` is one row written by its step's statement (`Tool.single_write`): its
    step can then be that statement alone, outside any session (`run_in_place`, `run_begun_in_place`)."""
    return TOOLS[tool].single_write("", args, utcnow()) is not None


async def run_in_place(
    runner: ExecutionRunner,
    session: AsyncSession | None,
    state: dict[str, Any],
    step: InPlaceStep,
    after: Callable[[dict[str, Any]], None],
) -> dict[str, Any]:
    """A whole step of a tool that works only in our database, in the caller's transaction: the call's row
    is written finished, and its events take their seqs in the statement that fences the claim, renews the
    lease and saves the agent's progress (on PostgreSQL that statement also inserts the events and the call's
    row). Its effect, result and progress commit together or not at all.

    On PostgreSQL, a step of a tool with a `single_write` in a session where nothing has run yet is that one
    statement, committing by itself: the caller must then write nothing more in this session. Without `session`
    (a tool with a `single_write`: `alone_in_place`), that statement commits by itself outside any session."""
    tool = TOOLS[step.tool]
    call_id, started, began = new_id("call"), utcnow(), time.perf_counter()
    effect: tuple[Companion, ...] = ()
    result: dict[str, Any] | None
    write = tool.single_write(runner.execution_id, step.args, started)
    if write is not None:
        # Its row is written by the step's statement below, with the call's row and the events.
        effect, result, error = (write.row,), write.result, None
        if session is not None:
            # Where nothing has run in this session, the whole step is that one statement: it may commit by itself.
            await commits_alone(session)
    elif session is None:
        raise ValueError(f"{step.tool}: a step whose effect is not one row runs in a session")
    else:
        ctx = ToolContext(session, runner.settings, runner.execution_id, call_id, started)
        result, error = await _record(tool, ctx, step.args, None)
    elapsed = time.perf_counter() - began
    call = {
        "id": call_id,
        "execution_id": runner.execution_id,
        "step_index": step.index,
        "tool": step.tool,
        "args": step.args,
        "provider_call_id": step.provider_call_id,
        "status": "failed" if error else "succeeded",
        "result": result,
        "error": error,
        "started_at": started,
        "finished_at": utcnow(),
    }
    answer = _answer(result, error)
    after(answer)
    budgets.spend(state, seconds=elapsed)
    events: list[TypedEvent] = [
        *step.before,
        (EventType.TOOL_CALL, _call_event(call_id, step.tool, step.args)),
        (EventType.TOOL_RESULT, _result_event(call_id, step.tool, result, error, elapsed)),
    ]
    parameters = {**runner.fenced(), "saved_state": dict(state)}
    if await _append(runner, session, events, _FENCED_STEP, parameters, (*effect, Companion(TOOL_CALLS, call))) is None:
        raise LeaseLost(runner.execution_id)
    return answer
