"""A suite's progress and results, computed in the database by aggregate SQL (issue 23, items 3 and 7).

Each number is defined as core/metrics.py defines it for one run, so a suite of one run shows that run's numbers:

- a run is *finished* when its execution has reached a final status and its verdict (if it has scorers) is
  recorded; *active* when it has started and is not finished; *pending* while it waits for a slot; *cancelled*
  when the suite was cancelled before it started.
- `passed` / `scored`: runs whose verdict is done with a pass (`verdict_passed` true) / a pass or a fail.
- `rejects` / `edits` of a run: reject decisions, and approvals that edited the arguments, of its checkpoints,
  the `human` scorer's grade excepted (`checkpointsRejected` of the run's metrics counts the same rejects).
- `revisions`: `checkpoint.revision_requested` events; agent time: the sum of `durationMs` of its
  `model.request` and `tool.result` events (`agentMs`); tokens from its `model.request` events.
- a review wait: one waited attempt of a checkpoint (not the grade), from its first `checkpoint.awaiting_review`
  event to the decision, or to the run's end when none came; automatic passes are no wait (`reviewLatencyMs`).
- `costUsd`: the sum of the requests' prices when every request's price is known, else null (no request: null).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncSession

from core.backends import Backend, backend_of
from core.models import CHECKPOINTS, DECISIONS, EVENTS, EXECUTIONS, SUITE_RUNS, SUITE_TASKS
from core.vocabulary import FINAL, CheckpointOrigin, EventType, VerdictState

# The normal quantile of a two-sided 95 % interval.
Z95 = 1.959963984540054

_R, _E = SUITE_RUNS.c, EXECUTIONS.c
_SUITE = sa.bindparam("suite_id", type_=sa.String())
_SUITE_EXECUTIONS = sa.select(_R.execution_id).where(_R.suite_id == _SUITE, _R.execution_id.is_not(None))

# A started run is finished when its execution is final and its verdict settled; one whose execution was deleted
# (only a finished one can be) counts as finished too.
FINISHED = sa.or_(
    _E.id.is_(None),
    sa.and_(
        _E.status.in_([str(status) for status in FINAL]),
        sa.or_(_E.verdict_state.is_(None), _E.verdict_state == VerdictState.DONE),
    ),
)


def _count(condition: sa.ColumnElement[bool]) -> sa.ColumnElement[int]:
    return sa.func.coalesce(sa.func.sum(sa.case((condition, 1), else_=0)), 0)


def progress_columns() -> list[sa.ColumnElement[Any]]:
    """Counts of a suite's runs over SUITE_RUNS left-joined to EXECUTIONS, grouped by suite."""
    started = _R.state == "started"
    return [
        sa.func.count().label("total"),
        _count(_R.state == "pending").label("pending"),
        _count(_R.state == "cancelled").label("cancelled"),
        _count(sa.and_(started, FINISHED)).label("finished"),
        _count(sa.and_(started, sa.not_(FINISHED))).label("active"),
        sa.func.max(sa.func.coalesce(_E.verdict_at, _E.completed_at)).label("last_end"),
    ]


@dataclass(frozen=True)
class Progress:
    total: int
    pending: int
    active: int
    finished: int
    cancelled: int
    last_end: datetime | None

    @classmethod
    def of(cls, row: Any) -> Progress:
        return cls(
            int(row.total), int(row.pending), int(row.active), int(row.finished), int(row.cancelled), row.last_end
        )

    def json(self) -> dict[str, int]:
        return {
            "total": self.total,
            "pending": self.pending,
            "active": self.active,
            "finished": self.finished,
            "cancelled": self.cancelled,
        }


async def progress_of(session: AsyncSession, suite_ids: Sequence[str]) -> dict[str, Progress]:
    rows = await session.execute(
        sa.select(_R.suite_id, *progress_columns())
        .select_from(SUITE_RUNS.outerjoin(EXECUTIONS, _E.id == _R.execution_id))
        .where(_R.suite_id.in_(list(suite_ids)))
        .group_by(_R.suite_id)
    )
    return {row.suite_id: Progress.of(row) for row in rows}


def wilson(passed: int, scored: int) -> tuple[float, float] | None:
    """The Wilson score interval (95 %) of a pass rate: sound near 0 and 1 and for few runs, where the normal
    approximation is not."""
    if scored == 0:
        return None
    p, n, z2 = passed / scored, scored, Z95 * Z95
    centre = (p + z2 / (2 * n)) / (1 + z2 / n)
    half = Z95 * math.sqrt(p * (1 - p) / n + z2 / (4 * n * n)) / (1 + z2 / n)
    return (round(max(0.0, centre - half), 6), round(min(1.0, centre + half), 6))


def _ms(microseconds: sa.ColumnElement[int]) -> sa.ColumnElement[int]:
    """Whole milliseconds, rounded half to even as Python's round() does (core.metrics.ms_between), never < 0."""
    us = sa.case((microseconds < 0, 0), else_=microseconds)
    whole, rest = us // 1000, us % 1000
    up = sa.or_(rest > 500, sa.and_(rest == 500, whole % 2 == 1))
    return whole + sa.case((up, 1), else_=0)


def _round_half_even(backend: Backend, value: sa.ColumnElement[float]) -> sa.ColumnElement[int]:
    """A number >= 0 rounded as Python's round() does (core.metrics rounds `agentMs` so)."""
    whole = backend.floor(value)
    rest = value - whole
    up = sa.or_(rest > 0.5, sa.and_(rest == 0.5, whole % 2 == 1))
    return whole + sa.case((up, 1), else_=0)


@functools.cache
def _statements(backend: Backend) -> tuple[sa.Select[Any], sa.Select[Any], sa.Select[Any], sa.Select[Any]]:
    """The per-run rows, the per-group aggregates and the two percentile queries of a suite (`suite_id`)."""
    payload, kind = EVENTS.c.payload, EVENTS.c.type
    request = kind == EventType.MODEL_REQUEST
    duration = sa.func.coalesce(payload["durationMs"].as_float(), 0.0)
    cost = payload["costUsd"].as_float()
    by_events = (
        sa.select(
            EVENTS.c.execution_id,
            sa.func.sum(
                sa.case((kind.in_([EventType.MODEL_REQUEST, EventType.TOOL_RESULT]), duration), else_=0.0)
            ).label("agent_ms"),
            _count(kind == EventType.CHECKPOINT_REVISION_REQUESTED).label("revisions"),
            sa.func.sum(sa.case((request, sa.func.coalesce(payload["inputTokens"].as_integer(), 0)), else_=0)).label(
                "input_tokens"
            ),
            sa.func.sum(sa.case((request, sa.func.coalesce(payload["outputTokens"].as_integer(), 0)), else_=0)).label(
                "output_tokens"
            ),
            _count(request).label("requests"),
            _count(sa.and_(request, cost.is_not(None))).label("priced"),
            sa.func.sum(sa.case((request, sa.func.coalesce(cost, 0.0)), else_=0.0)).label("cost"),
        )
        .where(
            EVENTS.c.execution_id.in_(_SUITE_EXECUTIONS),
            kind.in_([EventType.MODEL_REQUEST, EventType.TOOL_RESULT, EventType.CHECKPOINT_REVISION_REQUESTED]),
        )
        .group_by(EVENTS.c.execution_id)
        .subquery("by_events")
    )
    d, cp = DECISIONS.c, CHECKPOINTS.c
    edited = sa.and_(d.edited_args.is_not(None), sa.cast(d.edited_args, sa.Text()) != "null")
    by_decisions = (
        sa.select(
            d.execution_id,
            _count(d.decision == "reject").label("rejects"),
            _count(edited).label("edits"),
        )
        .join(CHECKPOINTS, cp.id == d.checkpoint_id)
        .where(d.execution_id.in_(_SUITE_EXECUTIONS), cp.origin != CheckpointOrigin.GRADE)
        .group_by(d.execution_id)
        .subquery("by_decisions")
    )
    runs = (
        sa.select(
            _R.position,
            _R.task_index,
            SUITE_TASKS.c.task_name,
            _R.model,
            _R.test_mode,
            _R.repeat,
            _R.state,
            _R.execution_id,
            _E.status,
            _E.verdict_state,
            _E.verdict_passed,
            _E.verdict_score,
            sa.case((sa.and_(_R.state == "started", FINISHED), True), else_=False).label("finished"),
            sa.func.coalesce(by_decisions.c.rejects, 0).label("rejects"),
            sa.func.coalesce(by_decisions.c.edits, 0).label("edits"),
            sa.func.coalesce(by_events.c.revisions, 0).label("revisions"),
            _round_half_even(backend, sa.func.coalesce(by_events.c.agent_ms, 0.0)).label("agent_ms"),
            sa.func.coalesce(by_events.c.input_tokens, 0).label("input_tokens"),
            sa.func.coalesce(by_events.c.output_tokens, 0).label("output_tokens"),
            sa.func.coalesce(by_events.c.requests, 0).label("requests"),
            sa.func.coalesce(by_events.c.priced, 0).label("priced"),
            sa.func.coalesce(by_events.c.cost, 0.0).label("cost"),
        )
        .select_from(
            SUITE_RUNS.join(
                SUITE_TASKS, sa.and_(SUITE_TASKS.c.suite_id == _R.suite_id, SUITE_TASKS.c.task_index == _R.task_index)
            )
            .outerjoin(EXECUTIONS, _E.id == _R.execution_id)
            .outerjoin(by_events, by_events.c.execution_id == _R.execution_id)
            .outerjoin(by_decisions, by_decisions.c.execution_id == _R.execution_id)
        )
        .where(_R.suite_id == _SUITE)
    )
    per_run = runs.subquery("per_run")
    done = per_run.c.verdict_state == VerdictState.DONE
    fin = per_run.c.finished
    groups = [per_run.c.model, per_run.c.test_mode]
    by_group = sa.select(
        *groups,
        sa.func.count().label("runs"),
        _count(fin).label("finished"),
        _count(per_run.c.status == "completed").label("completed"),
        _count(per_run.c.status == "failed").label("failed"),
        _count(sa.and_(done, per_run.c.verdict_passed.is_(True))).label("passed"),
        _count(sa.and_(done, per_run.c.verdict_passed.is_not(None))).label("scored"),
        _count(sa.and_(fin, sa.or_(per_run.c.rejects > 0, per_run.c.edits > 0))).label("intervened"),
        sa.func.coalesce(sa.func.sum(sa.case((fin, per_run.c.revisions), else_=0)), 0).label("revisions"),
        sa.func.coalesce(sa.func.sum(per_run.c.input_tokens), 0).label("input_tokens"),
        sa.func.coalesce(sa.func.sum(per_run.c.output_tokens), 0).label("output_tokens"),
        sa.func.coalesce(sa.func.sum(per_run.c.requests), 0).label("requests"),
        sa.func.coalesce(sa.func.sum(per_run.c.priced), 0).label("priced"),
        sa.func.coalesce(sa.func.sum(per_run.c.cost), 0.0).label("cost"),
    ).group_by(*groups)
    finished_runs = (
        sa.select(per_run.c.model, per_run.c.test_mode, per_run.c.agent_ms).where(fin).subquery("finished_runs")
    )
    agent_time = backend.percentiles(finished_runs, "agent_ms", ("model", "test_mode"), (0.5,))
    # Every waited attempt of a finished run's checkpoints (its grade excepted).
    pauses = (
        sa.select(
            EVENTS.c.execution_id,
            payload["checkpointId"].as_string().label("checkpoint_id"),
            sa.func.coalesce(payload["attempt"].as_integer(), 1).label("attempt"),
            EVENTS.c.created_at,
        )
        .where(EVENTS.c.execution_id.in_(_SUITE_EXECUTIONS), kind == EventType.CHECKPOINT_AWAITING_REVIEW)
        .subquery("pauses")
    )
    p = pauses.c
    started_waits = (
        sa.select(p.execution_id, p.checkpoint_id, p.attempt, sa.func.min(p.created_at).label("started_at"))
        .group_by(p.execution_id, p.checkpoint_id, p.attempt)
        .subquery("started_waits")
    )
    w = started_waits.c
    ended = sa.func.coalesce(d.decided_at, _E.completed_at)
    waits = (
        sa.select(
            _R.model,
            _R.test_mode,
            _ms(backend.microseconds_between(w.started_at, ended)).label("wait_ms"),
        )
        .select_from(
            started_waits.join(SUITE_RUNS, sa.and_(_R.execution_id == w.execution_id, _R.suite_id == _SUITE))
            .join(EXECUTIONS, _E.id == w.execution_id)
            .join(CHECKPOINTS, cp.id == w.checkpoint_id)
            .outerjoin(DECISIONS, sa.and_(d.checkpoint_id == w.checkpoint_id, d.attempt == w.attempt))
        )
        .where(
            cp.origin != CheckpointOrigin.GRADE,
            sa.or_(d.via.is_(None), d.via != "auto"),
            FINISHED,
            ended.is_not(None),
        )
        .subquery("waits")
    )
    review_wait = backend.percentiles(waits, "wait_ms", ("model", "test_mode"), (0.5, 0.9))
    return runs.order_by(_R.position), by_group, agent_time, review_wait


def _rate(part: int, whole: int) -> float | None:
    return round(part / whole, 6) if whole else None


def _number(value: Any) -> float:
    return round(float(value), 3)


async def suite_results(session: AsyncSession, suite_id: str) -> tuple[list[dict[str, Any]], list[Any]]:
    """The suite's `byModel` rows (one per model and test mode) and its per-run rows (in start order)."""
    runs, by_group, agent_time, review_wait = _statements(backend_of(session))
    bound = {"suite_id": suite_id}
    run_rows = list((await session.execute(runs, bound)).all())
    agent = {(r.model, r.test_mode): r.p0 for r in await session.execute(agent_time, bound)}
    waits = {(r.model, r.test_mode): (r.p0, r.p1) for r in await session.execute(review_wait, bound)}
    by_model = []
    for row in await session.execute(by_group, bound):
        key = (row.model, row.test_mode)
        passed, scored, finished = int(row.passed), int(row.scored), int(row.finished)
        interval = wilson(passed, scored)
        wait = waits.get(key)
        median_agent = agent.get(key)
        priced = int(row.requests) > 0 and int(row.priced) == int(row.requests)
        by_model.append(
            {
                "model": row.model,
                "testMode": row.test_mode,
                "runs": int(row.runs),
                "finished": finished,
                "completed": int(row.completed),
                "failed": int(row.failed),
                "passed": passed,
                "scored": scored,
                "passRate": _rate(passed, scored),
                "passRateInterval": list(interval) if interval else None,
                "interventionRate": _rate(int(row.intervened), finished),
                "revisionsPerRun": _rate(int(row.revisions), finished),
                "reviewWaitMs": {"p50": _number(wait[0]), "p90": _number(wait[1])} if wait else None,
                "agentTimeMs": {"p50": _number(median_agent)} if median_agent is not None else None,
                "inputTokens": int(row.input_tokens),
                "outputTokens": int(row.output_tokens),
                "costUsd": round(float(row.cost), 6) if priced else None,
            }
        )
    by_model.sort(key=lambda entry: (entry["model"], entry["testMode"]))
    return by_model, run_rows
