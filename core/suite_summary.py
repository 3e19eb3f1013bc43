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

# More than a suite can plan (api/schemas.py MAX_SUITE_RUNS): "every run".
MAX_RUNS = 1_000_000
# The normal quantile of a two-sided 95 % interval.
Z95 = 1.959963984540054

_R, _E = SUITE_RUNS.c, EXECUTIONS.c
_SUITE = sa.bindparam("suite_id", type_=sa.String())

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
def _statements(backend: Backend) -> tuple[sa.Select[Any], sa.Select[Any], sa.Select[Any]]:
    """A page of the suite's per-run rows (`suite_id`, `after` a position, `limit`), its per-group aggregates with
    the agent time's median, and its review waits' percentiles.

    Each run's sums are taken by joining its own events (and counting its decisions by a correlated subquery),
    then grouping by the run: every step is an index lookup per run, so the cost grows with the suite's runs and
    events whatever plan the database picks. (Joining the runs to per-execution aggregates instead lets
    PostgreSQL, when its statistics underestimate a new suite's runs, rescan the whole aggregate once per run.)
    """
    payload, kind = EVENTS.c.payload, EVENTS.c.type
    request = kind == EventType.MODEL_REQUEST
    duration = sa.func.coalesce(payload["durationMs"].as_float(), 0.0)
    cost = payload["costUsd"].as_float()
    d, cp = DECISIONS.c, CHECKPOINTS.c
    edited = sa.and_(d.edited_args.is_not(None), sa.cast(d.edited_args, sa.Text()) != "null")

    def decisions_where(condition: sa.ColumnElement[bool]) -> sa.ScalarSelect[int]:
        return (
            sa.select(sa.func.count())
            .select_from(DECISIONS.join(CHECKPOINTS, cp.id == d.checkpoint_id))
            .where(d.execution_id == _R.execution_id, cp.origin != CheckpointOrigin.GRADE, condition)
            .scalar_subquery()
        )

    def summed(condition: sa.ColumnElement[bool], value: Any, zero: Any) -> sa.ColumnElement[Any]:
        return sa.func.coalesce(sa.func.sum(sa.case((condition, value), else_=zero)), zero)

    agent_ms = summed(kind.in_([EventType.MODEL_REQUEST, EventType.TOOL_RESULT]), duration, 0.0)
    per_run = (
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
            decisions_where(d.decision == "reject").label("rejects"),
            decisions_where(edited).label("edits"),
            _count(kind == EventType.CHECKPOINT_REVISION_REQUESTED).label("revisions"),
            _round_half_even(backend, agent_ms).label("agent_ms"),
            summed(request, sa.func.coalesce(payload["inputTokens"].as_integer(), 0), 0).label("input_tokens"),
            summed(request, sa.func.coalesce(payload["outputTokens"].as_integer(), 0), 0).label("output_tokens"),
            _count(request).label("requests"),
            _count(sa.and_(request, cost.is_not(None))).label("priced"),
            summed(request, sa.func.coalesce(cost, 0.0), 0.0).label("cost"),
        )
        .select_from(
            SUITE_RUNS.join(
                SUITE_TASKS, sa.and_(SUITE_TASKS.c.suite_id == _R.suite_id, SUITE_TASKS.c.task_index == _R.task_index)
            )
            .outerjoin(EXECUTIONS, _E.id == _R.execution_id)
            .outerjoin(
                EVENTS,
                sa.and_(
                    EVENTS.c.execution_id == _R.execution_id,
                    kind.in_([EventType.MODEL_REQUEST, EventType.TOOL_RESULT, EventType.CHECKPOINT_REVISION_REQUESTED]),
                ),
            )
        )
        .where(_R.suite_id == _SUITE)
        # The primary keys: every other column depends on them.
        .group_by(_R.id, SUITE_TASKS.c.suite_id, SUITE_TASKS.c.task_index, _E.id)
    )
    page = (
        per_run.where(_R.position > sa.bindparam("after", type_=sa.Integer()))
        .order_by(_R.position)
        .limit(sa.bindparam("limit", type_=sa.Integer()))
    )
    # Used twice below: both databases compute it once for the statement.
    runs = per_run.cte("per_run")
    done = runs.c.verdict_state == VerdictState.DONE
    fin = runs.c.finished
    groups = [runs.c.model, runs.c.test_mode]
    by_group = (
        sa.select(
            *groups,
            sa.func.count().label("runs"),
            _count(fin).label("finished"),
            _count(runs.c.status == "completed").label("completed"),
            _count(runs.c.status == "failed").label("failed"),
            _count(sa.and_(done, runs.c.verdict_passed.is_(True))).label("passed"),
            _count(sa.and_(done, runs.c.verdict_passed.is_not(None))).label("scored"),
            _count(sa.and_(fin, sa.or_(runs.c.rejects > 0, runs.c.edits > 0))).label("intervened"),
            sa.func.coalesce(sa.func.sum(sa.case((fin, runs.c.revisions), else_=0)), 0).label("revisions"),
            sa.func.coalesce(sa.func.sum(runs.c.input_tokens), 0).label("input_tokens"),
            sa.func.coalesce(sa.func.sum(runs.c.output_tokens), 0).label("output_tokens"),
            sa.func.coalesce(sa.func.sum(runs.c.requests), 0).label("requests"),
            sa.func.coalesce(sa.func.sum(runs.c.priced), 0).label("priced"),
            sa.func.coalesce(sa.func.sum(runs.c.cost), 0.0).label("cost"),
        )
        .group_by(*groups)
        .subquery("by_group")
    )
    finished_runs = sa.select(runs.c.model, runs.c.test_mode, runs.c.agent_ms).where(fin).subquery("finished_runs")
    agent_time = backend.percentiles(finished_runs, "agent_ms", ("model", "test_mode"), (0.5,)).subquery("agent")
    groups_with_agent_time = sa.select(by_group, agent_time.c.p0.label("agent_p50")).select_from(
        by_group.outerjoin(
            agent_time, sa.and_(agent_time.c.model == by_group.c.model, agent_time.c.test_mode == by_group.c.test_mode)
        )
    )
    # Every waited attempt of a finished run's checkpoints (its grade excepted), found from the runs as above.
    checkpoint_of = payload["checkpointId"].as_string()
    attempt_of = sa.func.coalesce(payload["attempt"].as_integer(), 1)
    started_waits = (
        sa.select(
            _R.model,
            _R.test_mode,
            _R.execution_id,
            checkpoint_of.label("checkpoint_id"),
            attempt_of.label("attempt"),
            sa.func.min(EVENTS.c.created_at).label("started_at"),
        )
        .select_from(
            SUITE_RUNS.join(
                EVENTS,
                sa.and_(EVENTS.c.execution_id == _R.execution_id, kind == EventType.CHECKPOINT_AWAITING_REVIEW),
            )
        )
        .where(_R.suite_id == _SUITE)
        .group_by(_R.id, checkpoint_of, attempt_of)
        .subquery("started_waits")
    )
    w = started_waits.c
    ended = sa.func.coalesce(d.decided_at, _E.completed_at)
    waits = (
        sa.select(w.model, w.test_mode, _ms(backend.microseconds_between(w.started_at, ended)).label("wait_ms"))
        .select_from(
            started_waits.join(EXECUTIONS, _E.id == w.execution_id)
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
    return page, groups_with_agent_time, review_wait


def _rate(part: int, whole: int) -> float | None:
    return round(part / whole, 6) if whole else None


def _number(value: Any) -> float:
    return round(float(value), 3)


async def suite_results(session: AsyncSession, suite_id: str) -> list[dict[str, Any]]:
    """The suite's `byModel` rows: one per model and test mode, sorted by both."""
    _page, by_group, review_wait = _statements(backend_of(session))
    bound = {"suite_id": suite_id}
    waits = {(r.model, r.test_mode): (r.p0, r.p1) for r in await session.execute(review_wait, bound)}
    by_model = []
    for row in await session.execute(by_group, bound):
        key = (row.model, row.test_mode)
        passed, scored, finished = int(row.passed), int(row.scored), int(row.finished)
        interval = wilson(passed, scored)
        wait = waits.get(key)
        median_agent = row.agent_p50
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
    return by_model


async def run_rows(session: AsyncSession, suite_id: str, *, after: int = -1, limit: int | None = None) -> list[Any]:
    """The suite's runs after position `after`, in the suite's order, at most `limit` (None: all of them)."""
    page, _by_group, _review_wait = _statements(backend_of(session))
    bound = {"suite_id": suite_id, "after": after, "limit": limit if limit is not None else MAX_RUNS}
    return list((await session.execute(page, bound)).all())
