"""The calls of an external agent (`agentModel: "external"`): what each sends and how its answer is read.

Every event and checkpoint carries a key of the agent's own, so all but `complete` are safe to send again:
the server adds nothing twice and answers a repeated checkpoint with the same checkpoint (and its decision).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import BaseModel, ConfigDict

from vouch_client.calls import Call, _model, _segment

# The server holds a long-poll at most this long; the request's own timeout leaves room for the answer.
MAX_WAIT = 60.0
_ANSWER_MARGIN = 15.0


class CheckpointDecision(BaseModel):
    """A checkpoint as the agent sees it: `decision` is None while the reviewer has not answered."""

    model_config = ConfigDict(extra="allow")

    executionId: str
    checkpointId: str
    stage: str
    status: str
    attempt: int
    executionStatus: str
    decision: str | None = None
    comment: str | None = None
    editedArgs: dict[str, Any] | None = None
    args: dict[str, Any] = {}
    by: str | None = None
    via: str | None = None
    at: str | None = None

    @property
    def approved(self) -> bool:
        return self.decision == "approve"


class Completed(BaseModel):
    model_config = ConfigDict(extra="allow")

    executionId: str
    status: str


class EventsAnswer(BaseModel):
    model_config = ConfigDict(extra="allow")

    executionId: str
    events: list[dict[str, Any]]


def _path(execution_id: str, action: str) -> str:
    return f"/api/eval/executions/{_segment(execution_id)}/{action}"


def send_events(execution_id: str, events: Sequence[Mapping[str, Any]]) -> Call[EventsAnswer]:
    return Call("POST", _path(execution_id, "events"), _model(EventsAnswer), json={"events": [dict(e) for e in events]},
                idempotent=True)


def ask_checkpoint(
    execution_id: str,
    key: str,
    stage: str,
    question: str,
    action: Mapping[str, Any] | None,
    description: str = "",
) -> Call[CheckpointDecision]:
    body: dict[str, Any] = {"key": key, "stage": stage, "verificationQuestion": question, "description": description}
    if action is not None:
        body["nextAction"] = {"tool": action["tool"], "args": dict(action.get("args") or {})}
    return Call("POST", _path(execution_id, "checkpoints"), _model(CheckpointDecision), json=body, idempotent=True)


def checkpoint_decision(execution_id: str, checkpoint_id: str, wait: float) -> Call[CheckpointDecision]:
    wait = max(0.0, min(wait, MAX_WAIT))
    return Call(
        "GET",
        _path(execution_id, f"checkpoints/{_segment(checkpoint_id)}"),
        _model(CheckpointDecision),
        params=[("wait", f"{wait:g}")],
        idempotent=True,
        timeout=wait + _ANSWER_MARGIN,
    )


def complete(
    execution_id: str, status: str, result: Mapping[str, Any] | None = None, error: str | None = None
) -> Call[Completed]:
    body: dict[str, Any] = {"status": status}
    if result is not None:
        body["result"] = dict(result)
    if error is not None:
        body["error"] = error
    return Call("POST", _path(execution_id, "complete"), _model(Completed), json=body)
