"""A suite in a terminal: a progress bar per model while it runs, then a table per model and the pass-rate gate.

On a terminal the bars are redrawn in place (the cursor goes back up over them); anywhere else (a CI log) a line
is written only when the progress changes, so the log reads top to bottom. Colour as terminal.py decides it.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TextIO

from vouch_client.suite_models import ModelResult, Suite, SuiteRun
from vouch_client.terminal import CLEAR_LINE, elapsed_text, paint

BAR_WIDTH = 30
ACTIVE = frozenset({"queued", "running", "awaiting_review"})
# Each kind of run: its bar character, its colour (terminal.TONES) and the word the counts use.
KINDS = {
    "passed": ("█", "ok"),
    "failed": ("█", "bad"),
    "finished": ("█", None),
    "cancelled": ("-", "quiet"),
    "active": ("▒", "ask"),
    "pending": ("░", "quiet"),
}


def kind_of(run: SuiteRun) -> str:
    """Where a run stands for the bar: by its verdict once finished (a failed run without scorers is failed)."""
    if run.status == "pending":
        return "pending"
    if run.status in ACTIVE:
        return "active"
    if run.status == "cancelled":
        return "cancelled"
    if run.passed is True:
        return "passed"
    if run.passed is False or run.status in ("failed", "rejected"):
        return "failed"
    return "finished"


@dataclass
class Lane:
    """One model in one test mode, as its bar counts it."""

    model: str
    test_mode: str
    counts: dict[str, int] = field(default_factory=lambda: dict.fromkeys(KINDS, 0))

    @property
    def label(self) -> str:
        return f"{self.model} ({self.test_mode})"

    @property
    def total(self) -> int:
        return sum(self.counts.values())

    @property
    def done(self) -> int:
        return self.total - self.counts["active"] - self.counts["pending"]


def lanes(suite: Suite, runs: Sequence[SuiteRun]) -> list[Lane]:
    """A lane per model x mode, in the order the suite lists its models."""
    found: dict[tuple[str, str], Lane] = {}
    for row in suite.byModel:
        found.setdefault((row.model, row.testMode), Lane(row.model, row.testMode))
    for run in runs:
        lane = found.setdefault((run.model, run.testMode), Lane(run.model, run.testMode))
        lane.counts[kind_of(run)] += 1
    return list(found.values())


def _widths(counts: Iterable[int], total: int, width: int) -> list[int]:
    """Each count's share of `width` characters, rounded so the shares add up to the whole bar."""
    shares, before, running = [], 0, 0
    for count in counts:
        running += count
        edge = round(width * running / total) if total else 0
        shares.append(edge - before)
        before = edge
    return shares


def bar(lane: Lane, colour: bool) -> str:
    widths = _widths(lane.counts.values(), lane.total, BAR_WIDTH)
    drawn = "".join(
        paint(char * n, tone, colour) for (char, tone), n in zip(KINDS.values(), widths, strict=True) if n
    )
    return drawn + " " * (BAR_WIDTH - sum(widths))


def lane_line(lane: Lane, label_width: int, colour: bool) -> str:
    c = lane.counts
    parts = [paint(f"✓ {c['passed']}", "ok", colour), paint(f"✗ {c['failed']}", "bad", colour)]
    if c["finished"]:
        parts.append(f"{c['finished']} unscored")
    if c["active"]:
        parts.append(f"{c['active']} running")
    if c["cancelled"]:
        parts.append(f"{c['cancelled']} cancelled")
    count = f"{lane.done}/{lane.total}".rjust(9)
    return f"{lane.label.ljust(label_width)}  {bar(lane, colour)} {count}  " + "  ".join(parts)


def headline(suite: Suite, now: datetime | None = None) -> str:
    p = suite.progress
    end = suite.finishedAt or now or datetime.now(UTC)
    parts = [f"{p.finished}/{p.total} finished"]
    if p.active:
        parts.append(f"{p.active} in progress")
    if p.pending:
        parts.append(f"{p.pending} waiting to start")
    if p.cancelled:
        parts.append(f"{p.cancelled} cancelled")
    parts.append(f"{elapsed_text((end - suite.createdAt).total_seconds())} elapsed")
    return f"Suite {suite.name} [{suite.status}] · " + " · ".join(parts)


class SuiteView:
    """What `vouch suites run --watch` shows while the suite runs."""

    def __init__(self, out: TextIO, *, tty: bool, colour: bool) -> None:
        self.out = out
        self.tty = tty
        self.colour = colour
        self.drawn = 0  # lines of the last drawing, to go back up over
        self.last_logged: tuple[int, ...] | None = None

    def lines(self, suite: Suite, runs: Sequence[SuiteRun]) -> list[str]:
        found = lanes(suite, runs)
        width = max((len(lane.label) for lane in found), default=0)
        return [headline(suite), *(lane_line(lane, width, self.colour) for lane in found)]

    def show(self, suite: Suite, runs: Sequence[SuiteRun] = ()) -> None:
        """Draw the suite; on a terminal, a bar per model from its `runs` (every one, in the suite's order)."""
        if self.tty:
            up = f"\x1b[{self.drawn}F" if self.drawn else ""
            drawing = self.lines(suite, runs)
            self.out.write(up + "".join(CLEAR_LINE + line + "\n" for line in drawing))
            self.drawn = len(drawing)
            self.out.flush()
            return
        state = (suite.progress.finished, suite.progress.active, suite.progress.pending, suite.progress.cancelled)
        if state != self.last_logged:
            self.last_logged = state
            # A CI log gets plain words: bars redrawn into a file would only repeat.
            self.out.write(headline(suite) + "\n")
            self.out.flush()

    def note(self, text: str) -> None:
        """A line above the bars (they are drawn again below it on the next show)."""
        self.out.write(text + "\n")
        self.drawn = 0
        self.out.flush()


# The final table ----------------------------------------------------------------------------------------------


def percent(value: float | None) -> str:
    return "—" if value is None else f"{value * 100:.0f}%"


def precise(value: float) -> str:
    # The gate compares exact rates: 89.5 % must not read as the 90 % it fails to reach.
    return f"{value * 100:.1f}%"


def duration(ms: float | None) -> str:
    if ms is None:
        return "—"
    if ms < 1000:
        return f"{ms:.0f} ms"
    if ms < 60_000:
        return f"{ms / 1000:.1f} s"
    return elapsed_text(ms / 1000)


def pass_rate_text(row: ModelResult) -> str:
    if row.passRate is None or not row.scored:
        return "— (none scored)"
    interval = ""
    if row.passRateInterval:
        low, high = row.passRateInterval
        interval = f" [{low * 100:.0f}-{high * 100:.0f}%]"
    return f"{percent(row.passRate)}{interval} of {row.scored}"


def table(suite: Suite, colour: bool) -> list[str]:
    heading = ("MODEL", "MODE", "RUNS", "PASS RATE (95% CI)", "INTERVENTION", "REVIEW WAIT P50", "COST")
    rows = [heading] + [
        (
            row.model,
            row.testMode,
            f"{row.finished}/{row.runs}",
            pass_rate_text(row),
            percent(row.interventionRate),
            duration(row.reviewWaitMs.p50 if row.reviewWaitMs else None),
            "—" if row.costUsd is None else f"${row.costUsd:.4f}",
        )
        for row in suite.byModel
    ]
    widths = [max(len(r[i]) for r in rows) for i in range(len(heading))]
    lines = []
    for number, row in enumerate(rows):
        line = "  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip()
        lines.append(line if number else paint(line, "heading", colour))
    return lines


def gate(suite: Suite, minimum: float, colour: bool) -> tuple[bool, list[str]]:
    """Whether every model (in each test mode) passed at least `minimum` of its scored runs, and a line for each.
    A model with no scored run has shown nothing, so it does not pass."""
    lines, ok = [], bool(suite.byModel)
    for row in suite.byModel:
        if row.passRate is None or not row.scored:
            ok = False
            lines.append(paint(f"✗ {row.label}: no scored run, so no pass rate to check", "bad", colour))
        elif row.passRate < minimum:
            ok = False
            said = f"✗ {row.label}: pass rate {precise(row.passRate)} < {precise(minimum)}"
            lines.append(paint(said, "bad", colour))
        else:
            said = f"✓ {row.label}: pass rate {precise(row.passRate)} ≥ {precise(minimum)}"
            lines.append(paint(said, "ok", colour))
    if not suite.byModel:
        lines.append(paint("✗ the suite has no results to check", "bad", colour))
    return ok, lines
