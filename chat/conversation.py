"""An execution's events as the conversation the chat page shows.

The server renders the whole history from the event rows (so the page works without JavaScript and on
reload); static/js/chat-view.js builds the same items from the same wire messages as they arrive live. The two
follow the folding rules below; keep them in step.

- a tool call and its result are one collapsible item (keyed by toolCallId);
- a checkpoint awaiting review is a card; its decision updates the card and adds the reviewer's reply;
- the run's end (completed, failed, rejected, cancelled) is an outcome item with the result and metrics.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy.ext.asyncio import AsyncSession

from core.event_messages import event_message
from core.metrics import execution_metrics
from core.models import Event, Execution
from core.tool_args import argument_lines
from core.vocabulary import EventType

FINAL = ("completed", "failed", "rejected", "cancelled")
STATUS_TEXT = {
    "queued": "Queued: waiting for a worker",
    "running": "Running",
    "awaiting_review": "Waiting for review",
    "completed": "Completed",
    "failed": "Failed",
    "rejected": "Rejected",
    "cancelled": "Cancelled",
}
OUTCOMES = {
    EventType.EXECUTION_COMPLETED: "completed",
    EventType.EXECUTION_FAILED: "failed",
    EventType.EXECUTION_REJECTED: "rejected",
    EventType.EXECUTION_CANCELLED: "cancelled",
}


@dataclass
class Item:
    kind: str  # system | message | tool | card | reply | outcome
    seq: int
    at: str | None
    data: dict[str, Any] = field(default_factory=dict)


def pretty(value: Any) -> str:
    """Arguments and results as readable JSON (escaped by the template like any other text)."""
    return json.dumps(value, indent=2, ensure_ascii=False, sort_keys=False, default=str)


def _system_text(type_: str, payload: dict[str, Any]) -> str | None:
    match type_:
        case EventType.EXECUTION_CREATED:
            return "Task created"
        case EventType.EXECUTION_STARTED:
            return "The agent started"
        case EventType.EXECUTION_RESUMED:
            return "The agent resumed"
        case EventType.EXECUTION_UPDATED:
            what, to = payload.get("field", "A setting"), payload.get("to") or "nothing"
            return f"{what} changed to {to} by {payload.get('by', 'the owner')}"
        case EventType.CHECKPOINT_DECIDED if payload.get("via") == "auto":
            return "A checkpoint passed without review (test mode: without verification)"
        # Issue 5's review ladder; static/js/chat-view.js says the same words.
        case EventType.CHECKPOINT_REVISION_REQUESTED:
            return (
                f"Attempt {payload.get('attempt')} rejected: the agent revises and asks again "
                f"(attempt {payload.get('nextAttempt')})"
            )
        case EventType.REVIEW_REMINDER_SENT:
            return f"Reminder sent to {payload.get('to')}"
        case EventType.REVIEW_ESCALATED:
            return f"Escalated to the backup reviewer {payload.get('to')}"
        case EventType.REVIEW_DEADLINE_PASSED:
            return f"The review deadline passed: {payload.get('policy')} applies"
        case EventType.MAIL_FAILED:
            return f"Mail to {payload.get('to')} could not be sent: {payload.get('reason')}"
        case EventType.MODEL_REQUEST:
            return model_request_text(payload)
        case EventType.EXECUTION_SCORED:
            return verdict_text(payload)
    return None


def verdict_text(payload: dict[str, Any]) -> str:
    """Issue 23's verdict as one line; static/js/chat-view.js says the same words."""
    passed = payload.get("passed")
    said = "passed" if passed is True else "failed" if passed is False else "undecided"
    score = payload.get("score")
    return f"Verdict: {said}" + (f" (score {score:.2f})" if isinstance(score, int | float) else "")


def model_request_text(payload: dict[str, Any]) -> str:
    """One quiet line per model request; static/js/chat-view.js says the same words."""
    seconds = float(payload.get("durationMs") or 0) / 1000
    cost = payload.get("costUsd")
    text = (
        f"Asked {payload.get('model') or 'the model'}: {payload.get('inputTokens', 0)} tokens in, "
        f"{payload.get('outputTokens', 0)} out, {seconds:.1f} s"
    )
    return text + (f", ${cost:.4f}" if isinstance(cost, int | float) else "")


OUTCOME_TITLES = {
    "completed": "Task completed",
    "failed": "Task failed",
    "rejected": "Stopped: a checkpoint was rejected",
    "cancelled": "Task cancelled",
}


def outcome(status: str, payload: dict[str, Any]) -> dict[str, Any]:
    result = payload.get("result") or {}
    if status == "completed":
        skipped = result.get("unrecognised") or []
        detail = ("Skipped, not understood: " + "; ".join(map(str, skipped))) if skipped else ""
    elif status == "failed":
        error = payload.get("error")
        # {code, detail, ...} since failures have codes; a plain string in events recorded before.
        detail = str(error.get("detail") or error.get("code") or "") if isinstance(error, dict) else str(error or "")
    elif status == "rejected":
        detail = f"Rejected by {payload.get('by', 'the reviewer')}; the agent did nothing after that checkpoint."
    else:
        detail = f"Cancelled by {payload['by']}" if payload.get("by") else ""
    steps = [str(step) for step in result.get("steps") or []]
    return {"status": status, "title": OUTCOME_TITLES[status], "detail": detail, "steps": steps}


def fold(messages: Iterable[dict[str, Any]]) -> list[Item]:
    """Fold wire messages (core.event_messages.event_message), in seq order, into conversation items."""
    items: list[Item] = []
    tools: dict[str, Item] = {}
    cards: dict[str, Item] = {}
    for message in messages:
        type_, payload, seq, at = message["type"], message["payload"], message["seq"], message["at"]
        if type_ == EventType.AGENT_MESSAGE:
            items.append(Item("message", seq, at, {"text": str(payload.get("text", ""))}))
        elif type_ == EventType.TOOL_CALL:
            item = Item("tool", seq, at, {**payload, "argsText": pretty(payload.get("args", {})), "done": False})
            tools[str(payload.get("toolCallId"))] = item
            items.append(item)
        elif type_ == EventType.TOOL_RESULT:
            found = tools.get(str(payload.get("toolCallId")))
            if found is not None:
                failed = payload.get("error") is not None
                found.data.update(
                    done=True,
                    failed=failed,
                    resultText=str(payload["error"]) if failed else pretty(payload.get("result")),
                    durationMs=payload.get("durationMs"),
                )
        elif type_ == EventType.CHECKPOINT_AWAITING_REVIEW:
            next_action = payload.get("nextAction") or {}
            card = Item(
                "card",
                seq,
                at,
                {**payload, "nextArgs": argument_lines(next_action.get("args") or {}), "decision": None},
            )
            cards[str(payload.get("checkpointId"))] = card
            items.append(card)
        elif type_ == EventType.CHECKPOINT_DECIDED and payload.get("via") != "auto":
            decided = cards.get(str(payload.get("checkpointId")))
            if decided is not None:
                decided.data["decision"] = payload
            stage = decided.data.get("stage") if decided is not None else None
            edits = _edits(payload)
            if edits and decided is not None:
                held = tools.get(str(decided.data.get("toolCallId")))
                if held is not None:
                    _run_as_edited(held, payload, edits)
            items.append(Item("reply", seq, at, {**payload, "stage": stage, "editLines": argument_lines(edits)}))
        elif type_ in OUTCOMES:
            items.append(Item("outcome", seq, at, outcome(OUTCOMES[type_], payload)))
        else:
            text = _system_text(type_, payload)
            if text is not None:
                items.append(Item("system", seq, at, {"text": text}))
    return items


def _edits(decided: dict[str, Any]) -> dict[str, Any]:
    """The arguments an approval changed (none for a rejection or a plain approval)."""
    edited = decided.get("editedArgs")
    return dict(edited) if decided.get("decision") == "approve" and isinstance(edited, dict) else {}


def _run_as_edited(call: Item, decided: dict[str, Any], edits: dict[str, Any]) -> None:
    """The call a reviewer approved with edits ran with them: its arguments as run, and as the agent proposed
    them beside (the tool.call event recorded the proposal, before the review)."""
    proposed = decided.get("originalArgs") or call.data.get("args") or {}
    call.data.update(edited=True, argsText=pretty({**proposed, **edits}), proposedText=pretty(proposed))


async def run_metrics(session: AsyncSession, execution: Execution) -> dict[str, Any]:
    """The same metrics as the status API's, from the same function."""
    return await execution_metrics(session, execution)


def status_of(execution: Execution) -> dict[str, Any]:
    """The status line's facts, as the page renders them and a join returns them."""
    text = STATUS_TEXT.get(execution.status, execution.status)
    if execution.status == "awaiting_review" and execution.assigned_reviewer:
        text = f"Waiting for review by {execution.assigned_reviewer}"
    return {
        "status": execution.status,
        "text": text,
        "final": execution.status in FINAL,
        "assignedReviewer": execution.assigned_reviewer,
        # The last event this state reflects: a client holding later events keeps what they say.
        "lastSeq": execution.last_seq,
    }


def messages_of(rows: Sequence[Event]) -> list[dict[str, Any]]:
    return [event_message(row) for row in rows]
