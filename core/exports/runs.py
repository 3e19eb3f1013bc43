"""Reading a suite's runs for an export, a chunk at a time, and the record every format starts from.

A chunk of runs costs four queries (executions, checkpoints, decisions, events), not four per run, and only one
chunk's rows are held at a time. The metrics are the status record's own (core.metrics.metrics_of, from the same
facts), so an export and `GET /api/eval/status/<id>` never disagree.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm import defer

from core.errors import error_object
from core.formatting import isoformat
from core.metrics import AGENT_EVENTS, FACT_EVENTS, FactEvent, RunFacts, metrics_of
from core.models import EVENTS, SUITE_RUNS, SUITE_TASKS, Checkpoint, Decision, Execution, utcnow
from core.scorers import verdict_json
from core.vocabulary import EventType

# Runs read per round of queries: bounds what an export holds at once (a run's events can be long).
CHUNK = 50
# The metrics' events, and the agent's messages (the conversation the Inspect log shows).
_READ_EVENTS = (*FACT_EVENTS, EventType.AGENT_MESSAGE)


@dataclass(frozen=True)
class ExportRun:
    """One run of a suite, as the suite plans it. `execution_id` is None for a run not started (yet); `state` is
    the suite's word for it then ("pending", or "cancelled" when the suite was cancelled first), and the export
    gives it as the run's status. `task_index` and `repeat` are the suite's own numbers, unchanged."""

    execution_id: str | None
    suite_id: str
    suite_name: str
    task_index: int
    model: str
    test_mode: str
    repeat: int
    state: str = "started"
    # The task's name as the suite holds it, for a run without an execution; an execution's own name wins.
    task_name: str | None = None


@dataclass(frozen=True)
class LoadedRun:
    run: ExportRun
    # None for a run without an execution.
    facts: RunFacts | None = None
    # Every event the export reads, in seq order: the metrics' ones and the agent's messages.
    events: list[FactEvent] = field(default_factory=list)


async def load_runs(session: AsyncSession, runs: Sequence[ExportRun], *, now: datetime) -> AsyncIterator[LoadedRun]:
    """Each run with its rows, in the order given, reading `CHUNK` runs at a time."""
    for start in range(0, len(runs), CHUNK):
        chunk = runs[start : start + CHUNK]
        ids = [run.execution_id for run in chunk if run.execution_id is not None]
        loaded = await _load_chunk(session, ids, now) if ids else {}
        for run in chunk:
            found = loaded.get(run.execution_id) if run.execution_id is not None else None
            yield LoadedRun(run) if found is None else LoadedRun(run, *found)


async def _load_chunk(
    session: AsyncSession, ids: list[str], now: datetime
) -> dict[str, tuple[RunFacts, list[FactEvent]]]:
    # The agent's persisted state can be the model's whole conversation, and the offline agent's plan is in its
    # events: nothing here reads either.
    executions = await session.scalars(
        sa.select(Execution)
        .where(Execution.id.in_(ids))
        .options(defer(Execution.agent_state), defer(Execution.agent_plan))
    )
    checkpoints: dict[str, list[Checkpoint]] = {}
    for checkpoint in await session.scalars(
        sa.select(Checkpoint).where(Checkpoint.execution_id.in_(ids)).order_by(Checkpoint.position)
    ):
        checkpoints.setdefault(checkpoint.execution_id, []).append(checkpoint)
    decisions: dict[str, list[Decision]] = {}
    for decision in await session.scalars(
        sa.select(Decision).where(Decision.execution_id.in_(ids)).order_by(Decision.decided_at, Decision.attempt)
    ):
        decisions.setdefault(decision.execution_id, []).append(decision)
    events: dict[str, list[FactEvent]] = {}
    rows = await session.execute(
        sa.select(EVENTS.c.execution_id, EVENTS.c.seq, EVENTS.c.type, EVENTS.c.payload, EVENTS.c.created_at)
        .where(EVENTS.c.execution_id.in_(ids), EVENTS.c.type.in_(_READ_EVENTS))
        .order_by(EVENTS.c.execution_id, EVENTS.c.seq)
    )
    for execution_id, seq, type_, payload, at in rows:
        events.setdefault(execution_id, []).append(FactEvent(seq, type_, payload or {}, at))
    loaded: dict[str, tuple[RunFacts, list[FactEvent]]] = {}
    for execution in executions:
        own = events.get(execution.id, [])
        first_agent = min((e.at for e in own if e.type in AGENT_EVENTS), default=None)
        facts = RunFacts(
            execution,
            [e for e in own if e.type in FACT_EVENTS],
            checkpoints.get(execution.id, []),
            decisions.get(execution.id, []),
            first_agent,
            now,
        )
        loaded[execution.id] = (facts, own)
    return loaded


def decision_json(decision: Decision, checkpoint: Checkpoint | None) -> dict[str, Any]:
    """One reviewer's (or the service's) answer at one attempt of a checkpoint, with the checkpoint it answered."""
    return {
        "checkpointId": decision.checkpoint_id,
        "stage": checkpoint.stage if checkpoint is not None else None,
        "origin": checkpoint.origin if checkpoint is not None else None,
        "attempt": decision.attempt,
        "decision": decision.decision,
        "by": decision.decided_by,
        "via": decision.via,
        "at": isoformat(decision.decided_at),
        "comment": decision.comment,
        "originalArgs": decision.original_args,
        "editedArgs": decision.edited_args,
        "rating": decision.rating,
        "labels": list(decision.labels) if decision.labels is not None else None,
    }


def run_record(loaded: LoadedRun) -> dict[str, Any]:
    """The run as JSON Lines writes it (and the CSV flattens): the suite's coordinates, the task, the output
    and what was expected, the verdict, the metrics and every decision."""
    run = loaded.run
    record: dict[str, Any] = {
        "suiteId": run.suite_id,
        "suiteName": run.suite_name,
        "taskIndex": run.task_index,
        "model": run.model,
        "testMode": run.test_mode,
        "repeat": run.repeat,
        "executionId": run.execution_id,
    }
    facts = loaded.facts
    if facts is None:
        record.update(
            {"taskName": run.task_name, "input": None, "status": run.state, "createdAt": None, "completedAt": None,
             "output": None, "expected": None, "error": None, "verdict": None, "metrics": None, "decisions": []}
        )
        return record
    execution = facts.execution
    stages = {checkpoint.id: checkpoint for checkpoint in facts.checkpoints}
    record.update(
        {
            "taskName": execution.task_name,
            "input": execution.task_description,
            "status": execution.status,
            "createdAt": isoformat(execution.created_at),
            "completedAt": isoformat(execution.completed_at),
            "output": (execution.result or {}).get("output"),
            "expected": execution.expected,
            "error": error_object(execution.error_info, execution.error),
            "verdict": verdict_json(
                execution.verdict_state, execution.verdict_passed, execution.verdict_score, execution.verdict_scores
            ),
            "metrics": metrics_of(facts),
            "decisions": [decision_json(d, stages.get(d.checkpoint_id)) for d in facts.decisions],
        }
    )
    return record


def export_time() -> datetime:
    """One moment for the whole export: a run still under way has its open intervals run to it."""
    return utcnow()


async def suite_export_runs(session: AsyncSession, suite_id: str, suite_name: str) -> list[ExportRun]:
    """The suite's runs as an export takes them: every planned run in the suite's order, with its task's name."""
    run, task = SUITE_RUNS.c, SUITE_TASKS.c
    rows = await session.execute(
        sa.select(
            SUITE_RUNS.c.execution_id,
            SUITE_RUNS.c.task_index,
            SUITE_RUNS.c.model,
            SUITE_RUNS.c.test_mode,
            SUITE_RUNS.c.repeat,
            SUITE_RUNS.c.state,
            SUITE_TASKS.c.task_name,
        )
        .join(
            SUITE_TASKS,
            sa.and_(task.suite_id == run.suite_id, task.task_index == run.task_index),
        )
        .where(SUITE_RUNS.c.suite_id == suite_id)
        .order_by(SUITE_RUNS.c.position)
    )
    return [
        ExportRun(
            row.execution_id, suite_id, suite_name, row.task_index, row.model, row.test_mode, row.repeat,
            # A started run whose execution was deleted has no rows left to export: it is its own word, "deleted".
            row.state if row.state != "started" or row.execution_id is not None else "deleted",
            row.task_name,
        )
        for row in rows
    ]
