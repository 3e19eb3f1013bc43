"""Per-execution performance metrics, computed from stored rows and events only.

Nothing here reads a clock of the process that ran the agent or keeps a counter in memory: every
number comes from `executions`, `checkpoints`, `decisions` and `events` rows, so the status API, the
chat, the web pages and a webhook payload get the same answer from any process. (The one exception is
an execution still under way, whose open intervals run to `now`.)

Definitions (the status record's `metrics`, documented in api/openapi_models.py too):

- `durationMs`: created → completed (or → now while it is not final).
- `agentMs`: time the agent *worked*: the sum of model request durations (`model.request.durationMs`)
  and tool durations (`tool.result.durationMs`). Chosen over "duration minus review waits" because that
  would count time queued for a worker and process restarts as agent work.
- `reviewWaitMs`: the sum of every review wait of every attempt of every checkpoint (a rejected attempt
  that the agent revised counts as well as the approved one); equals the sum of `reviewLatencyMs[].ms`.
  A wait still open runs to now, or to the execution's end when it ended without a decision (cancelled).
- `reviewLatencyMs`: one entry per waited attempt `{checkpointId, attempt, ms}`, in the order they began.
- `timeToFirstEventMs`: created → the first agent event (agent.message, tool.call or model.request).
- `steps`: tool steps finished (tool.result events, failed ones included); `toolCalls`: tool calls
  started; `toolCallsByTool`: started calls per tool name.
- `checkpointsApproved`: approve decisions (automatic passes included); `checkpointsRejected`: reject
  decisions, one per rejected attempt; `revisions`: rejections the agent went back to revise after.
- `costUsd`: the sum of the requests' prices when every request's price is known; null when any is
  unknown or when no model request was made (the offline agent).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncSession

from core.models import Checkpoint, Decision, Event, Execution, utcnow
from core.vocabulary import FINAL, CheckpointOrigin, CheckpointStatus, EventType

AGENT_EVENTS = (EventType.AGENT_MESSAGE, EventType.TOOL_CALL, EventType.MODEL_REQUEST)
# The event types the metrics and the timeline read (agent.message is only needed for its time, below).
FACT_EVENTS = (
    EventType.EXECUTION_STARTED,
    EventType.EXECUTION_RESUMED,
    EventType.TOOL_CALL,
    EventType.TOOL_RESULT,
    EventType.MODEL_REQUEST,
    EventType.CHECKPOINT_AWAITING_REVIEW,
    EventType.CHECKPOINT_REVISION_REQUESTED,
    EventType.EXECUTION_COMPLETED,
    EventType.EXECUTION_FAILED,
    EventType.EXECUTION_REJECTED,
    EventType.EXECUTION_CANCELLED,
)
_REVIEWED_STATUSES = frozenset({CheckpointStatus.AWAITING_REVIEW, CheckpointStatus.APPROVED, CheckpointStatus.REJECTED})


def ms_between(start: datetime, end: datetime) -> int:
    """Whole milliseconds from `start` to `end`, never negative (clocks of two hosts may disagree slightly)."""
    return max(0, round((end - start) / timedelta(milliseconds=1)))


@dataclass(frozen=True)
class FactEvent:
    seq: int
    type: str
    payload: dict[str, Any]
    at: datetime


@dataclass(frozen=True)
class ReviewWait:
    """One attempt of one checkpoint, from the agent's pause to the decision (or to now / the end)."""

    checkpoint_id: str
    attempt: int
    start: datetime
    end: datetime
    decision: str | None  # approve | reject | cancel; None while it waits, or when the run ended first

    @property
    def ms(self) -> int:
        return ms_between(self.start, self.end)


@dataclass(frozen=True)
class RunFacts:
    """What the metrics and the execution page's timeline are computed from."""

    execution: Execution
    events: list[FactEvent]
    checkpoints: list[Checkpoint]
    decisions: list[Decision]
    first_agent_event_at: datetime | None
    now: datetime

    @property
    def end(self) -> datetime:
        """Where open intervals stop: the execution's end, or now while it is not final."""
        if self.execution.status in FINAL and self.execution.completed_at is not None:
            return self.execution.completed_at
        return self.now


async def load_facts(session: AsyncSession, execution: Execution, *, now: datetime | None = None) -> RunFacts:
    rows = await session.execute(
        sa.select(Event.seq, Event.type, Event.payload, Event.created_at)
        .where(Event.execution_id == execution.id, Event.type.in_(FACT_EVENTS))
        .order_by(Event.seq)
    )
    events = [FactEvent(seq, type_, payload or {}, at) for seq, type_, payload, at in rows.all()]
    checkpoints = list(
        await session.scalars(
            sa.select(Checkpoint).where(Checkpoint.execution_id == execution.id).order_by(Checkpoint.position)
        )
    )
    decisions = list(
        await session.scalars(
            sa.select(Decision)
            .where(Decision.execution_id == execution.id)
            .order_by(Decision.decided_at, Decision.attempt)
        )
    )
    # Messages can be long; only the time of the first agent event is needed, so it is asked for alone
    # (min() takes the column's type, so the value comes back an aware UTC datetime on both databases).
    first: datetime | None = await session.scalar(
        sa.select(sa.func.min(Event.created_at)).where(Event.execution_id == execution.id, Event.type.in_(AGENT_EVENTS))
    )
    return RunFacts(execution, events, checkpoints, decisions, first, now or utcnow())


def grade_checkpoints(facts: RunFacts) -> frozenset[str]:
    """The `human` scorer's grade (issue 23) is asked after the run has ended: it is the evaluation of the run,
    not part of it, so the run's metrics leave it out (its wait would run past the run's end)."""
    return frozenset(cp.id for cp in facts.checkpoints if cp.origin == CheckpointOrigin.GRADE)


def review_waits(facts: RunFacts) -> list[ReviewWait]:
    """Every waited attempt of every checkpoint of the run (not its grade), in the order the waits began."""
    grades = grade_checkpoints(facts)
    starts: dict[tuple[str, int], datetime] = {}
    for event in facts.events:
        if event.type == EventType.CHECKPOINT_AWAITING_REVIEW and event.payload.get("checkpointId") not in grades:
            key = (str(event.payload.get("checkpointId")), int(event.payload.get("attempt", 1)))
            starts.setdefault(key, event.at)
    for cp in facts.checkpoints:
        # The current attempt's start is the column the status record shows as `awaitingSince`: the
        # metrics agree with the record exactly. (A checkpoint sent back to `pending` for a revision
        # still holds its previous attempt's start there, so only a waiting or decided one counts.)
        if cp.awaiting_since is not None and cp.status in _REVIEWED_STATUSES and cp.id not in grades:
            starts[(cp.id, cp.attempt)] = cp.awaiting_since
    decided = {(d.checkpoint_id, d.attempt): d for d in facts.decisions}
    waits = []
    for (checkpoint_id, attempt), start in starts.items():
        decision = decided.get((checkpoint_id, attempt))
        if decision is not None and decision.via == "auto":
            continue  # passed without a person: not a wait
        end = decision.decided_at if decision is not None else facts.end
        waits.append(ReviewWait(checkpoint_id, attempt, start, end, decision.decision if decision else None))
    return sorted(waits, key=lambda wait: (wait.start, wait.checkpoint_id, wait.attempt))


def _number(value: Any) -> float:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else 0.0


@dataclass(frozen=True)
class MetricsSoFar:
    """`metrics_of` with the clock left out: what the facts fix is counted once, and `at(end)` adds the
    intervals that run to `end`. The status cache keeps one per unfinished execution, so a request computes
    only the part that moves (api/status_cache.py)."""

    # Every field, in metrics_of's order; those that run to the execution's end (durationMs, reviewWaitMs,
    # reviewLatencyMs) are None until `at` fills them.
    counted: dict[str, Any]
    created_at: datetime
    # (checkpoint id, attempt, start, end); the end is None for a wait that runs to the execution's end.
    waits: tuple[tuple[str, int, datetime, datetime | None], ...]

    @classmethod
    def of(cls, facts: RunFacts) -> MetricsSoFar:
        tool_calls: dict[str, int] = {}
        steps = model_requests = input_tokens = output_tokens = revisions = 0
        agent_ms = 0.0
        costs: list[float | None] = []
        for event in facts.events:
            payload = event.payload
            if event.type == EventType.TOOL_CALL:
                tool = str(payload.get("tool", "?"))
                tool_calls[tool] = tool_calls.get(tool, 0) + 1
            elif event.type == EventType.TOOL_RESULT:
                steps += 1
                agent_ms += _number(payload.get("durationMs"))
            elif event.type == EventType.MODEL_REQUEST:
                model_requests += 1
                agent_ms += _number(payload.get("durationMs"))
                input_tokens += int(_number(payload.get("inputTokens")))
                output_tokens += int(_number(payload.get("outputTokens")))
                cost = payload.get("costUsd")
                costs.append(_number(cost) if isinstance(cost, int | float) and not isinstance(cost, bool) else None)
            elif event.type == EventType.CHECKPOINT_REVISION_REQUESTED:
                revisions += 1
        known = bool(costs) and all(cost is not None for cost in costs)
        execution = facts.execution
        grades = grade_checkpoints(facts)
        decisions = [d for d in facts.decisions if d.checkpoint_id not in grades]
        counted = {
            "durationMs": None,
            "agentMs": round(agent_ms),
            "reviewWaitMs": None,
            "timeToFirstEventMs": (
                ms_between(execution.created_at, facts.first_agent_event_at) if facts.first_agent_event_at else None
            ),
            "steps": steps,
            "modelRequests": model_requests,
            "inputTokens": input_tokens,
            "outputTokens": output_tokens,
            "toolCalls": sum(tool_calls.values()),
            "toolCallsByTool": dict(sorted(tool_calls.items())),
            "checkpointsApproved": sum(1 for d in decisions if d.decision == "approve"),
            "checkpointsRejected": sum(1 for d in decisions if d.decision == "reject"),
            "revisions": revisions,
            "reviewLatencyMs": None,
            # Rounded to a millionth of a dollar so that float sums read the same everywhere.
            "costUsd": round(sum(cost or 0.0 for cost in costs), 6) if known else None,
        }
        waits = tuple(
            # A wait without a decision runs to the execution's end (review_waits gave it facts.end).
            (wait.checkpoint_id, wait.attempt, wait.start, wait.end if wait.decision is not None else None)
            for wait in review_waits(facts)
        )
        return cls(counted, execution.created_at, waits)

    def clock_fields(self, end: datetime) -> dict[str, Any]:
        """The fields that run to the end, for an execution whose end (or now, while it is not final) is `end`."""
        latency = [
            {"checkpointId": checkpoint_id, "attempt": attempt, "ms": ms_between(start, wait_end or end)}
            for checkpoint_id, attempt, start, wait_end in self.waits
        ]
        return {
            "durationMs": ms_between(self.created_at, end),
            "reviewWaitMs": sum(entry["ms"] for entry in latency),
            "reviewLatencyMs": latency,
        }

    def at(self, end: datetime) -> dict[str, Any]:
        """The metrics of an execution whose end (or now, while it is not final) is `end`."""
        metrics = dict(self.counted)
        metrics.update(self.clock_fields(end))
        return metrics


def metrics_of(facts: RunFacts) -> dict[str, Any]:
    return MetricsSoFar.of(facts).at(facts.end)


async def execution_metrics(
    session: AsyncSession, execution: Execution, *, now: datetime | None = None
) -> dict[str, Any]:
    """The status record's `metrics` of `execution` (see the module docstring for what each means)."""
    return metrics_of(await load_facts(session, execution, now=now))
