"""A suite's runs arranged for its page: the task x model grid, and what human review changed, task by task.

Both read the suite's summary as the API answers it (api/suite_summary.py), so the page and the JSON never
disagree about a run.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

ACTIVE = frozenset({"queued", "running", "awaiting_review"})
WITH, WITHOUT = "with-verification", "without-verification"
# A run's outcome in the grid: its mark, and the word a screen reader and the cell's tooltip say.
OUTCOMES = {
    "passed": ("✓", "passed"),
    "failed": ("✗", "failed"),
    "unscored": ("∘", "finished, not scored"),
    "active": ("…", "in progress"),
    "pending": ("·", "not started yet"),
    "cancelled": ("⊘", "cancelled"),
}


def outcome_of(run: Mapping[str, Any]) -> str:
    status = run.get("status")
    if status == "pending":
        return "pending"
    if status in ACTIVE:
        return "active"
    if status == "cancelled":
        return "cancelled"
    if run.get("passed") is True:
        return "passed"
    if run.get("passed") is False or status in ("failed", "rejected"):
        return "failed"
    return "unscored"


@dataclass(frozen=True)
class RunCell:
    outcome: str
    mark: str
    title: str
    href: str | None
    rejects: int
    edits: int
    repeat: int


@dataclass(frozen=True)
class Column:
    model: str
    test_mode: str

    @property
    def label(self) -> str:
        return f"{self.model} ({self.test_mode})"


@dataclass
class GridRow:
    task_index: int
    task_name: str
    cells: list[list[RunCell]] = field(default_factory=list)


def columns_of(summary: Mapping[str, Any]) -> list[Column]:
    """A column per model and mode, in the summary's order (the runs add any it does not list)."""
    found: dict[tuple[str, str], Column] = {}
    for row in [*summary.get("byModel", []), *summary.get("runs", [])]:
        key = (str(row["model"]), str(row["testMode"]))
        found.setdefault(key, Column(*key))
    return list(found.values())


def _cell(run: Mapping[str, Any]) -> RunCell:
    outcome = outcome_of(run)
    mark, word = OUTCOMES[outcome]
    rejects, edits = int(run.get("rejects") or 0), int(run.get("edits") or 0)
    title = f"Repeat {int(run.get('repeat') or 1)}: {word}"
    if run.get("score") is not None:
        title += f", score {float(run['score']):.2f}"
    if rejects or edits:
        title += f"; {rejects} rejected, {edits} edited"
    href = run.get("chatUrl") if run.get("executionId") else None
    return RunCell(outcome, mark, title, href, rejects, edits, int(run.get("repeat") or 0))


def grid(summary: Mapping[str, Any]) -> tuple[list[Column], list[GridRow]]:
    """Tasks down, models across; each cell holds the task's runs on that model, repeat by repeat."""
    columns = columns_of(summary)
    place = {(c.model, c.test_mode): i for i, c in enumerate(columns)}
    rows: dict[int, GridRow] = {}
    for run in sorted(summary.get("runs", []), key=lambda r: (r["taskIndex"], int(r.get("repeat") or 0))):
        row = rows.get(run["taskIndex"])
        if row is None:
            row = rows[run["taskIndex"]] = GridRow(run["taskIndex"], str(run["taskName"]), [[] for _ in columns])
        row.cells[place[(str(run["model"]), str(run["testMode"]))]].append(_cell(run))
    return columns, [rows[i] for i in sorted(rows)]


@dataclass(frozen=True)
class Side:
    """One task on one model in one mode: how many runs passed of those scored, and the reviewers' work."""

    passed: int
    scored: int
    runs: int
    rejects: int
    edits: int

    @property
    def text(self) -> str:
        if not self.scored:
            return f"not scored ({self.runs} run{'s' if self.runs != 1 else ''})"
        return f"{self.passed}/{self.scored} passed"

    @property
    def share(self) -> float | None:
        return self.passed / self.scored if self.scored else None


@dataclass(frozen=True)
class Oversight:
    task_name: str
    model: str
    reviewed: Side
    unreviewed: Side
    change: str  # helped | hurt | same | unknown: the row's class
    said: str


def _side(runs: Sequence[Mapping[str, Any]]) -> Side:
    scored = [r for r in runs if r.get("passed") is not None]
    return Side(
        passed=sum(1 for r in scored if r["passed"]),
        scored=len(scored),
        runs=len(runs),
        rejects=sum(int(r.get("rejects") or 0) for r in runs),
        edits=sum(int(r.get("edits") or 0) for r in runs),
    )


def oversight(summary: Mapping[str, Any]) -> list[Oversight]:
    """For every task and model run both with and without review: the outcome each way, and which was better."""
    runs: dict[tuple[int, str, str], list[Mapping[str, Any]]] = {}
    names: dict[int, str] = {}
    for run in summary.get("runs", []):
        runs.setdefault((run["taskIndex"], str(run["model"]), str(run["testMode"])), []).append(run)
        names[run["taskIndex"]] = str(run["taskName"])
    found = []
    for (task, model, mode), with_review in sorted(runs.items()):
        if mode != WITH or (task, model, WITHOUT) not in runs:
            continue
        reviewed, unreviewed = _side(with_review), _side(runs[(task, model, WITHOUT)])
        if reviewed.share is None or unreviewed.share is None:
            change, said = "unknown", "not scored both ways yet"
        elif reviewed.share > unreviewed.share:
            change, said = "helped", "better with review"
        elif reviewed.share < unreviewed.share:
            change, said = "hurt", "worse with review"
        else:
            change, said = "same", "the same either way"
        found.append(Oversight(names[task], model, reviewed, unreviewed, change, said))
    return found
