"""The conversation of an execution in a terminal: one line per thing that happens, and a footer.

On a terminal the footer is the progress line (state, steps, elapsed time), redrawn in place every second,
or the checkpoint prompt while one waits for an answer. Anywhere else (a CI log) there is no footer: the
lines alone, and each change of state as a line of its own, so the log reads top to bottom.
"""

from __future__ import annotations

import json
import os
from datetime import UTC, datetime
from typing import Any, TextIO

from vouch_client.models import Event, StatusRecord

CLEAR_LINE = "\r\x1b[2K"
# SGR codes by what a line means: good news green, bad news red, a question yellow, the agent's acts cyan,
# bookkeeping dim, column headings bold.
TONES = {"ok": "32", "bad": "31", "ask": "33", "act": "36", "quiet": "2", "heading": "1"}
STATUS_TONES = {
    "completed": "ok",
    "failed": "bad",
    "rejected": "bad",
    "cancelled": "quiet",
    "awaiting_review": "ask",
    "running": "act",
    "queued": "quiet",
}
STATE_WORDS = {
    "queued": "queued",
    "running": "running",
    "awaiting_review": "waiting for review",
    "completed": "completed",
    "failed": "failed",
    "rejected": "rejected",
    "cancelled": "cancelled",
}


def colour_wanted(stream: TextIO) -> bool:
    """Colour only on a terminal that takes it: never with NO_COLOR set to anything (no-color.org), nor with
    TERM=dumb, nor into a pipe or a file (a CI log)."""
    if os.environ.get("NO_COLOR") or os.environ.get("TERM") == "dumb":
        return False
    isatty = getattr(stream, "isatty", None)
    return bool(isatty is not None and isatty())


def paint(text: str, tone: str | None, colour: bool) -> str:
    """`text` in the colour of `tone` where colour is on; unchanged otherwise."""
    return f"\x1b[{TONES[tone]}m{text}\x1b[0m" if colour and tone else text


def tone_of(event: Event) -> str | None:
    """What an event's line means, for its colour."""
    p = event.payload
    match event.type:
        case "execution.completed":
            return "ok"
        case "execution.failed" | "execution.rejected":
            return "bad"
        case "checkpoint.awaiting_review":
            return "ask"
        case "checkpoint.decided":
            if p.get("via") == "auto":
                return "quiet"
            return "ok" if p.get("decision") == "approve" else "bad"
        case "tool.call":
            return "act"
        case "tool.result":
            return "bad" if "error" in p else None
        case "agent.message":
            return None
    return "quiet"


def _clip(value: Any, limit: int = 160) -> str:
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)
    text = " ".join(text.split())  # one line per item, whatever the agent wrote
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _action_lines(payload: dict[str, Any]) -> str:
    """The proposed call under a checkpoint's line: the tool, then every argument in full, each line of a long
    value indented under its name (the terminal wraps them; nothing is cut)."""
    action = payload.get("nextAction") or {}
    if not action:
        return ""
    lines = [f"  next: {action.get('tool')}" + (f" ({action['instruction']})" if action.get("instruction") else "")]
    for name, value in (action.get("args") or {}).items():
        text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
        first, *rest = text.split("\n")
        lines.append(f"    {name}: {first}")
        lines.extend(f"      {line}" for line in rest)
    if action.get("editable"):
        lines.append("  (approve with changed arguments: vouch checkpoints decide … approve --set name=value)")
    if payload.get("readsComments") is False:
        lines.append("  This agent cannot read comments: a rejection ends the run.")
    return "\n" + "\n".join(lines)


def describe(event: Event) -> str | None:
    """One line for an event, or None for events the conversation does not show."""
    p = event.payload
    match event.type:
        case "execution.created":
            return f"· Task created: {p.get('taskName', '')}"
        case "execution.started":
            return "· The agent started"
        case "execution.resumed":
            return "· The agent resumed"
        case "agent.message":
            return f"agent: {_clip(p.get('text', ''), 400)}"
        case "tool.call":
            return f"→ {p.get('tool')} {_clip(p.get('args', {}))}"
        case "tool.result":
            if "error" in p:
                return f"  ✗ {p.get('tool')} failed: {_clip(p['error'])}"
            return f"  ✓ {p.get('tool')} {_clip(p.get('result'), 120)}"
        case "checkpoint.awaiting_review":
            return f"? Checkpoint {p.get('stage')}: {p.get('verificationQuestion')}" + _action_lines(p)
        case "checkpoint.decided":
            if p.get("via") == "auto":
                return "· A checkpoint passed without review"
            verb = {"approve": "approved", "reject": "rejected"}.get(str(p.get("decision")), str(p.get("decision")))
            mark = "✔" if p.get("decision") == "approve" else "✘"
            comment = f": {_clip(p['comment'])}" if p.get("comment") else ""
            return f"{mark} {verb} by {p.get('by')} via {p.get('via')}{comment}"
        case "checkpoint.revision_requested":
            return f"· The agent revises after the comment and asks again (attempt {p.get('nextAttempt')})"
        case "execution.updated":
            return f"· {p.get('field')} changed to {p.get('to') or 'nothing'} by {p.get('by')}"
        case "review.reminder_sent":
            return f"· Reminder sent to {p.get('to')}"
        case "review.escalated":
            return f"· Escalated to the backup reviewer {p.get('to')}"
        case "review.deadline_passed":
            return f"· The review deadline passed: {p.get('policy')} applies"
        case "mail.failed":
            return f"· Mail to {p.get('to')} could not be sent: {_clip(p.get('reason', ''))}"
        case "execution.completed":
            summary = (p.get("result") or {}).get("summary")
            return "■ Completed" + (f": {_clip(summary, 400)}" if summary else "")
        case "execution.failed":
            return f"■ Failed: {_clip(p.get('error', ''))}"
        case "execution.rejected":
            return f"■ Rejected by {p.get('by')}" + (f": {_clip(p['comment'])}" if p.get("comment") else "")
        case "execution.cancelled":
            return "■ Cancelled" + (f" by {p['by']}" if p.get("by") else "")
    return None


def elapsed_text(seconds: float) -> str:
    seconds = max(0, int(seconds))
    hours, rest = divmod(seconds, 3600)
    return f"{hours}:{rest // 60:02d}:{rest % 60:02d}" if hours else f"{rest // 60}:{rest % 60:02d}"


class LiveView:
    """What `vouch tasks watch` shows; fed events in order, asked to redraw by a ticker."""

    def __init__(self, out: TextIO, status: StatusRecord, *, tty: bool, colour: bool = False) -> None:
        self.out = out
        self.tty = tty
        self.colour = colour
        self.execution_id = status.executionId
        self.task_name = status.taskName
        self.state = status.status
        self.created_at = status.createdAt
        self.finished_at = status.completedAt
        self.steps = 0
        self.prompt: str | None = None

    def _now(self) -> datetime:
        return datetime.now(UTC)

    def progress(self) -> str:
        end = self.finished_at or self._now()
        word = STATE_WORDS.get(self.state, self.state)
        return f"[{word}] {self.steps} steps · {elapsed_text((end - self.created_at).total_seconds())} elapsed"

    def _footer(self) -> str:
        return self.prompt if self.prompt is not None else self.progress()

    def redraw(self) -> None:
        if self.tty:
            self.out.write(CLEAR_LINE + self._footer())
            self.out.flush()

    def line(self, text: str, tone: str | None = None) -> None:
        # Only the first line takes the colour: what follows (a checkpoint's arguments) is the agent's text.
        first, newline, rest = text.partition("\n")
        text = paint(first, tone, self.colour) + newline + rest
        self.out.write((CLEAR_LINE if self.tty else "") + text + "\n")
        self.redraw()
        if not self.tty:
            self.out.flush()

    def header(self) -> None:
        self.line(f"{self.task_name} ({self.execution_id})")

    def event(self, event: Event) -> None:
        before = self.state
        match event.type:
            case "execution.started" | "execution.resumed":
                self.state = "running"
            case "checkpoint.awaiting_review":
                self.state = "awaiting_review"
            case "checkpoint.decided" | "checkpoint.revision_requested" if self.state == "awaiting_review":
                self.state = "running"
            case "tool.result":
                self.steps += 1
        if event.outcome is not None:
            self.state = event.outcome
            self.finished_at = event.at or self._now()
        text = describe(event)
        if text is not None:
            self.line(text, tone_of(event))
        if not self.tty and self.state != before and event.outcome is None:
            self.line(f"  {self.progress()}")

    def ask(self, text: str | None) -> None:
        """Show a prompt in place of the progress line (None: back to progress)."""
        self.prompt = text
        self.redraw()

    def finish(self, status: StatusRecord) -> None:
        self.prompt = None
        self.state = status.status
        self.finished_at = status.completedAt or self.finished_at
        m = status.metrics
        seconds = (m.durationMs or 0) / 1000
        summary = f"{STATE_WORDS.get(status.status, status.status)} in {seconds:.1f} s · {m.steps} steps"
        if m.reviewWaitMs:
            summary += f" · {m.reviewWaitMs / 1000:.1f} s waiting for review"
        summary = paint(summary, STATUS_TONES.get(status.status), self.colour)
        self.out.write((CLEAR_LINE if self.tty else "") + f"Result: {summary}\n")
        self.out.flush()
