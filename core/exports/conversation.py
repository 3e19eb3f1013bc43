"""A run's conversation as turns, rebuilt from its events: what the agent said, the tools it called and what
each call returned, in order.

A turn begins at each model request (a model-backed agent) or at each message of an agent that asks no model
(the offline one); the tool calls that follow belong to it, and their results follow it. A call a reviewer
rejected has no result event: the agent was answered with the reviewer's comment instead (agents/model_steps.py),
and the turn shows that answer, found through the review the call waited on and its decision.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from core.metrics import FactEvent
from core.models import Decision as DecisionRow
from core.vocabulary import Decision, EventType


@dataclass
class Call:
    id: str
    tool: str
    args: dict[str, Any]
    # What the call returned (its result as JSON text, or the reviewer's answer), and its error if it failed.
    result: str | None = None
    error: str | None = None
    # True when a reviewer's rejection answered it instead of the tool.
    rejected: bool = False


@dataclass
class Turn:
    text: str = ""
    # The model that answered (as the provider named it); None for an agent that asks no model.
    model: str | None = None
    calls: list[Call] = field(default_factory=list)


def turns_of(events: list[FactEvent], decisions: list[DecisionRow]) -> list[Turn]:
    turns: list[Turn] = []
    calls: dict[str, Call] = {}
    # The review each call waited on: (checkpoint, attempt) of the checkpoint.awaiting_review naming it.
    waited: dict[str, tuple[str, int]] = {}
    for event in events:
        payload = event.payload
        if event.type == EventType.MODEL_REQUEST:
            turns.append(Turn(model=payload.get("model")))
        elif event.type == EventType.AGENT_MESSAGE:
            text = str(payload.get("text") or "")
            if turns and turns[-1].model is not None and not turns[-1].text and not turns[-1].calls:
                turns[-1].text = text  # the text of the model's answer just requested
            else:
                turns.append(Turn(text=text))
        elif event.type == EventType.TOOL_CALL:
            if not turns:
                turns.append(Turn())
            call = Call(str(payload.get("toolCallId")), str(payload.get("tool")), dict(payload.get("args") or {}))
            calls[call.id] = call
            turns[-1].calls.append(call)
        elif event.type == EventType.TOOL_RESULT:
            answered = calls.get(str(payload.get("toolCallId")))
            if answered is not None:
                if "error" in payload:
                    answered.error = str(payload["error"])
                    answered.result = answered.error
                else:
                    answered.result = json.dumps(payload.get("result"), ensure_ascii=False)
        elif event.type == EventType.CHECKPOINT_AWAITING_REVIEW and payload.get("toolCallId"):
            waited[str(payload["toolCallId"])] = (str(payload.get("checkpointId")), int(payload.get("attempt", 1)))
    answers = {(d.checkpoint_id, d.attempt): d for d in decisions}
    for call_id, review in waited.items():
        held = calls.get(call_id)
        answer = answers.get(review)
        if held is not None and held.result is None and answer is not None and answer.decision == Decision.REJECT:
            held.rejected = True
            said = f"Their comment:\n{answer.comment}" if answer.comment else ""
            held.result = f"Rejected by the reviewer ({answer.decided_by}). {said}".strip()
    return turns
