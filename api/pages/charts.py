"""Chart geometry for the execution pages, computed on the server and drawn as inline SVG by the templates.

Server-side SVG needs no script (the CSP allows none inline), works without JavaScript, and draws from the
same numbers as the page. Colours come from classes in static/css/vouch.css, never from style attributes
(the CSP has no 'unsafe-inline' for styles either). Labels go through the templates' autoescaping.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import date, datetime, timedelta

from core.formatting import duration as duration_text
from core.metrics import RunFacts, ms_between, review_waits
from core.vocabulary import ENDING_EVENTS, EventType

WIDTH = 760  # drawing width of the bars, in SVG units
LEFT = 120  # room for the lane names
LANE = 28
BAR = 18
STATUS_ORDER = ("queued", "running", "awaiting_review", "completed", "failed", "rejected", "cancelled")
WAIT_BUCKETS: tuple[tuple[str, float], ...] = (
    ("< 1 min", 60),
    ("1-5 min", 300),
    ("5-15 min", 900),
    ("15-60 min", 3600),
    ("1-4 h", 4 * 3600),
    ("4-24 h", 24 * 3600),
    ("> 1 day", float("inf")),
)


@dataclass(frozen=True)
class Bar:
    kind: str  # agent-work | model-request | tool-call | review-wait
    css: str
    x: float
    y: float
    width: float
    label: str


@dataclass(frozen=True)
class Tick:
    x: float
    label: str


@dataclass(frozen=True)
class Timeline:
    lanes: list[tuple[str, float]]  # (name, y of its label)
    bars: list[Bar]
    ticks: list[Tick]
    height: float
    width: float = LEFT + WIDTH + 10
    left: float = LEFT


def _agent_intervals(facts: RunFacts) -> list[tuple[datetime, datetime]]:
    """When the agent held the execution: from each start or resume to its next pause or end."""
    intervals: list[tuple[datetime, datetime]] = []
    opened: datetime | None = None
    for event in facts.events:
        if event.type in (EventType.EXECUTION_STARTED, EventType.EXECUTION_RESUMED):
            if opened is not None:  # a resume without a pause: the previous worker died; its span ends here
                intervals.append((opened, event.at))
            opened = event.at
        elif opened is not None and (event.type == EventType.CHECKPOINT_AWAITING_REVIEW or event.type in ENDING_EVENTS):
            intervals.append((opened, event.at))
            opened = None
    if opened is not None:
        intervals.append((opened, facts.end))
    return intervals


def timeline(facts: RunFacts, checkpoint_names: dict[str, str]) -> Timeline:
    """Agent work, model requests, tool calls and one bar per review wait, on one time axis."""
    origin = facts.execution.created_at
    total_ms = max(1, ms_between(origin, facts.end))

    def x_of(moment: datetime) -> float:
        return LEFT + WIDTH * min(1.0, ms_between(origin, moment) / total_ms)

    def bar(kind: str, css: str, lane: int, start: datetime, end: datetime, label: str) -> Bar:
        x = x_of(start)
        # Never thinner than 2 units: a 3 ms tool call stays visible on an hour's axis.
        return Bar(kind, css, x, 8 + lane * LANE, max(2.0, x_of(end) - x), label)

    names = ["Agent work", "Model requests", "Tool calls", "Review waits"]
    bars = [
        bar("agent-work", "agent", 0, start, end, f"Agent working: {duration_text(ms_between(start, end))}")
        for start, end in _agent_intervals(facts)
    ]
    started: dict[str, tuple[datetime, str]] = {}
    for event in facts.events:
        if event.type == EventType.MODEL_REQUEST:
            duration = float(event.payload.get("durationMs") or 0)
            begin = event.at - timedelta(milliseconds=duration)
            model = str(event.payload.get("model", "model"))
            bars.append(bar("model-request", "model", 1, begin, event.at, f"{model}: {duration_text(duration)}"))
        elif event.type == EventType.TOOL_CALL:
            started[str(event.payload.get("toolCallId"))] = (event.at, str(event.payload.get("tool", "tool")))
        elif event.type == EventType.TOOL_RESULT:
            begin, tool = started.pop(str(event.payload.get("toolCallId")), (event.at, "tool"))
            failed = "error" in event.payload
            text = f"{tool}: {duration_text(ms_between(begin, event.at))}" + (" (failed)" if failed else "")
            bars.append(bar("tool-call", "tool failed" if failed else "tool", 2, begin, event.at, text))
    for begin, tool in started.values():  # still running
        bars.append(bar("tool-call", "tool open", 2, begin, facts.end, f"{tool}: running"))
    for wait in review_waits(facts):
        outcome = {"approve": "approved", "reject": "rejected", "cancel": "cancelled"}.get(wait.decision or "", "open")
        name = checkpoint_names.get(wait.checkpoint_id, wait.checkpoint_id)
        label = f"{name}, attempt {wait.attempt}: waited {duration_text(wait.ms)} ({outcome})"
        bars.append(bar("review-wait", f"wait {outcome}", 3, wait.start, wait.end, label))
    ticks = [Tick(LEFT + WIDTH * i / 4, duration_text(total_ms * i / 4) if i else "0") for i in range(5)]
    lanes = [(name, float(8 + i * LANE + BAR - 5)) for i, name in enumerate(names)]
    return Timeline(lanes, bars, ticks, height=8 + len(names) * LANE + 22)


@dataclass(frozen=True)
class Column:
    label: str
    x: float
    segments: list[tuple[str, float, float, int]]  # (css/status, y, height, count)
    total: int


@dataclass(frozen=True)
class ColumnChart:
    columns: list[Column]
    height: float
    width: float
    column_width: float
    legend: list[str]
    top: int


def status_over_time(rows: Sequence[tuple[datetime, str]], first: date, last: date) -> ColumnChart:
    """Executions created per day, stacked by status, from `first` to `last` (UTC days)."""
    days = [first + timedelta(days=i) for i in range((last - first).days + 1)]
    counts: dict[date, dict[str, int]] = {day: {} for day in days}
    for created, status in rows:
        day = created.date()
        if day in counts:
            counts[day][status] = counts[day].get(status, 0) + 1
    top = max((sum(c.values()) for c in counts.values()), default=0) or 1
    plot, step = 140.0, min(48.0, 760 / max(1, len(days)))
    columns = []
    for i, day in enumerate(days):
        y, segments = 10 + plot, []
        for status in STATUS_ORDER:
            count = counts[day].get(status, 0)
            if count:
                height = plot * count / top
                y -= height
                segments.append((status, y, height, count))
        columns.append(Column(day.strftime("%m-%d"), 40 + i * step, segments, sum(counts[day].values())))
    seen = [s for s in STATUS_ORDER if any(counts[d].get(s) for d in days)]
    return ColumnChart(columns, 10 + plot + 24, 40 + len(days) * step + 10, step * 0.7, seen, top)


def wait_distribution(waits_seconds: Sequence[float]) -> ColumnChart:
    """How many review waits fell in each bucket (< 1 min … > 1 day)."""
    counts = [0] * len(WAIT_BUCKETS)
    for seconds in waits_seconds:
        counts[next(i for i, (_, bound) in enumerate(WAIT_BUCKETS) if seconds <= bound)] += 1
    top = max(counts) or 1
    plot, step = 140.0, 90.0
    columns = []
    for i, ((label, _), count) in enumerate(zip(WAIT_BUCKETS, counts, strict=True)):
        height = plot * count / top
        segments = [("wait", 10 + plot - height, height, count)] if count else []
        columns.append(Column(label, 40 + i * step, segments, count))
    return ColumnChart(columns, 10 + plot + 24, 40 + len(WAIT_BUCKETS) * step + 10, step * 0.7, [], top)
