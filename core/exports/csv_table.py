"""CSV: one row per run with the scalar fields of its JSON Lines record, and a `score_<scorer>` column per scorer.

The scorers' columns are known before the first row: one query over the runs' `scorers` (small lists) names them,
in the order they first appear. Values are written by the `csv` module (RFC 4180 quoting: commas, quotes and line
breaks inside a field are kept); null is an empty field, a boolean `true` / `false`, and `expected` that is not
text is its JSON.
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import AsyncIterator, Sequence
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncSession

from core.exports.runs import CHUNK, ExportRun, export_time, load_runs, run_record
from core.models import EXECUTIONS
from core.vocabulary import Decision

RECORD_COLUMNS = (
    "suiteId", "suiteName", "taskIndex", "model", "testMode", "repeat", "executionId", "taskName", "status",
    "input", "output", "expected",
)
VERDICT_COLUMNS = ("passed", "score")
METRIC_COLUMNS = (
    "inputTokens", "outputTokens", "costUsd", "agentMs", "reviewWaitMs", "durationMs", "modelRequests", "toolCalls",
    "checkpointsApproved", "checkpointsRejected", "revisions",
)
# Counted from the decisions: edited approvals, and the reviewers' ratings (their mean) across the run.
DECISION_COLUMNS = ("edits", "decisions", "meanRating")
TAIL_COLUMNS = ("errorCode", "createdAt", "completedAt")


async def scorer_names(session: AsyncSession, runs: Sequence[ExportRun]) -> list[str]:
    """Every scorer's name among the runs, in the order they first appear (runs in order, scorers in order)."""
    ids = [run.execution_id for run in runs if run.execution_id is not None]
    by_id: dict[str, list[Any]] = {}
    for start in range(0, len(ids), CHUNK * 10):
        part = ids[start : start + CHUNK * 10]
        rows = await session.execute(sa.select(EXECUTIONS.c.id, EXECUTIONS.c.scorers).where(EXECUTIONS.c.id.in_(part)))
        by_id.update({execution_id: scorers or [] for execution_id, scorers in rows})
    names: dict[str, None] = {}
    for execution_id in ids:
        for scorer in by_id.get(execution_id, []):
            names.setdefault(str(scorer["name"]), None)
    return list(names)


def _cell(value: Any) -> Any:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, dict | list):
        return json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    return value


def header(scorers: list[str]) -> list[str]:
    return [*RECORD_COLUMNS, *VERDICT_COLUMNS, *(f"score_{name}" for name in scorers), *METRIC_COLUMNS,
            *DECISION_COLUMNS, *TAIL_COLUMNS]


def row_of(record: dict[str, Any], scorers: list[str]) -> list[Any]:
    verdict = record["verdict"] or {}
    metrics = record["metrics"] or {}
    decisions = record["decisions"]
    by_scorer = {entry["scorer"]: entry.get("score") for entry in verdict.get("scores", [])}
    ratings = [d["rating"] for d in decisions if d["rating"] is not None]
    values: list[Any] = [record[name] for name in RECORD_COLUMNS]
    values += [verdict.get(name) for name in VERDICT_COLUMNS]
    values += [by_scorer.get(name) for name in scorers]
    values += [metrics.get(name) for name in METRIC_COLUMNS]
    values += [
        sum(1 for d in decisions if d["decision"] == Decision.APPROVE and d["editedArgs"] is not None),
        len(decisions),
        sum(ratings) / len(ratings) if ratings else None,
    ]
    values += [(record["error"] or {}).get("code"), record["createdAt"], record["completedAt"]]
    return [_cell(value) for value in values]


async def csv_export(session: AsyncSession, runs: Sequence[ExportRun]) -> AsyncIterator[bytes]:
    """The runs as CSV (UTF-8, a header row, CRLF line ends), yielded a row at a time."""
    scorers = await scorer_names(session, runs)
    buffer = io.StringIO()
    writer = csv.writer(buffer)

    def taken() -> bytes:
        text = buffer.getvalue()
        buffer.seek(0)
        buffer.truncate()
        return text.encode()

    writer.writerow(header(scorers))
    yield taken()
    async for loaded in load_runs(session, runs, now=export_time()):
        writer.writerow(row_of(run_record(loaded), scorers))
        yield taken()
