"""The status record of an execution, built from its rows and events."""

from __future__ import annotations

from typing import Any

from sqlalchemy.ext.asyncio import AsyncSession

from agents.model_names import OFFLINE
from core.errors import error_object
from core.formatting import isoformat
from core.metrics import RunFacts, load_facts, metrics_of
from core.model_profiles import EXTERNAL
from core.models import Checkpoint, Decision, Execution
from core.scorers import verdict_json
from core.webhooks import webhook_record
from review import DecisionRecord


def next_action_of(checkpoint: Checkpoint) -> dict[str, Any] | None:
    """The action the agent proposed when it last paused at `checkpoint`, with every argument in full: what
    an approval lets happen while it waits, and what was proposed once decided (the decision's `editedArgs`
    say what ran instead). None when the agent has not paused there (yet)."""
    action = checkpoint.next_action
    if not action:
        return None
    return {"tool": action.get("tool"), "args": action.get("args") or {}, "editable": bool(action.get("editable"))}


async def status_record(session: AsyncSession, execution: Execution, chat_url: str) -> dict[str, Any]:
    record, facts = await record_and_facts(session, execution)
    record["chatUrl"] = chat_url
    record["metrics"] = metrics_of(facts)
    return record


async def record_and_facts(session: AsyncSession, execution: Execution) -> tuple[dict[str, Any], RunFacts]:
    """The record without its two parts that are not facts of the rows: `chatUrl` (it depends on the host the
    request named, when no base URL is configured) and `metrics` (open intervals run to now); both None here.
    The facts are what `metrics_of` computes the metrics from (api/status_cache.py does so at serve time)."""
    # The checkpoints and decisions the metrics read are the ones the record shows: loaded once.
    facts = await load_facts(session, execution)
    # Every attempt's decision is kept; `decision` is the one on the checkpoint's current attempt.
    history: dict[str, list[Decision]] = {}
    for row in sorted(facts.decisions, key=lambda d: d.attempt):
        history.setdefault(row.checkpoint_id, []).append(row)
    checkpoints: list[tuple[Checkpoint, Decision | None]] = [
        (cp, next((d for d in history.get(cp.id, []) if d.attempt == cp.attempt), None)) for cp in facts.checkpoints
    ]
    record = {
        "success": True,
        "executionId": execution.id,
        "taskName": execution.task_name,
        "status": execution.status,
        "testMode": execution.test_mode,
        "assignedReviewer": execution.assigned_reviewer,
        "agentModel": execution.agent_model,
        "agent": agent_of(execution.agent_model),
        "autoDetectCheckpoints": execution.auto_detect_checkpoints,
        "chatUrl": None,
        "createdAt": isoformat(execution.created_at),
        "startedAt": isoformat(execution.started_at),
        "completedAt": isoformat(execution.completed_at),
        "checkpointCount": len(checkpoints),
        "checkpoints": [
            {
                "checkpointId": cp.id,
                "stage": cp.stage,
                "description": cp.description,
                "verificationQuestion": cp.verification_question,
                "origin": cp.origin,
                "status": cp.status,
                "awaitingSince": isoformat(cp.awaiting_since),
                "nextAction": next_action_of(cp),
                "decision": DecisionRecord.of(decision).as_json() if decision else None,
                "attempt": cp.attempt,
                "attempts": [
                    {**DecisionRecord.of(d).as_json(), "remoteAddr": d.remote_addr} for d in history.get(cp.id, [])
                ],
            }
            for cp, decision in checkpoints
        ],
        "result": execution.result,
        "error": error_object(execution.error_info, execution.error),
        "metrics": None,
        "webhook": await webhook_record(session, execution),
        # Issue 23: what the run should produce, how it is scored, and the verdict (None without scorers).
        "expected": execution.expected,
        "scorers": execution.scorers,
        "verdict": verdict_json(
            execution.verdict_state, execution.verdict_passed, execution.verdict_score, execution.verdict_scores
        ),
    }
    return record, facts


def agent_of(model: str) -> dict[str, str]:
    """The agent named for what it is: the built-in offline agent follows rules, any other asks a model."""
    kind = "rule-based" if model == OFFLINE else "external" if model == EXTERNAL else "model"
    return {"model": model, "kind": kind}
