"""The status record of an execution, built from its rows and events."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncSession

from core.events import isoformat
from core.metrics import execution_metrics
from core.models import Checkpoint, Decision, Execution
from core.webhooks import webhook_record
from review import DecisionRecord


async def metrics(
    session: AsyncSession, execution: Execution, checkpoints: Sequence[tuple[Checkpoint, Decision | None]] = ()
) -> dict[str, Any]:
    """The record's `metrics`: core.metrics computes them from the rows (`checkpoints` is kept for callers
    that still pass it; the metrics read every attempt themselves)."""
    return await execution_metrics(session, execution)


async def status_record(session: AsyncSession, execution: Execution, chat_url: str) -> dict[str, Any]:
    rows = await session.scalars(
        sa.select(Checkpoint).where(Checkpoint.execution_id == execution.id).order_by(Checkpoint.position)
    )
    decided = await session.scalars(
        sa.select(Decision).where(Decision.execution_id == execution.id).order_by(Decision.attempt)
    )
    # Every attempt's decision is kept; `decision` is the one on the checkpoint's current attempt.
    history: dict[str, list[Decision]] = {}
    for row in decided:
        history.setdefault(row.checkpoint_id, []).append(row)
    checkpoints: list[tuple[Checkpoint, Decision | None]] = [
        (cp, next((d for d in history.get(cp.id, []) if d.attempt == cp.attempt), None)) for cp in rows
    ]
    return {
        "success": True,
        "executionId": execution.id,
        "taskName": execution.task_name,
        "status": execution.status,
        "testMode": execution.test_mode,
        "assignedReviewer": execution.assigned_reviewer,
        "agentModel": execution.agent_model,
        "autoDetectCheckpoints": execution.auto_detect_checkpoints,
        "chatUrl": chat_url,
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
                "decision": DecisionRecord.of(decision).as_json() if decision else None,
                "attempt": cp.attempt,
                "attempts": [
                    {**DecisionRecord.of(d).as_json(), "remoteAddr": d.remote_addr} for d in history.get(cp.id, [])
                ],
            }
            for cp, decision in checkpoints
        ],
        "result": execution.result,
        "error": execution.error,
        "metrics": await metrics(session, execution, checkpoints),
        "webhook": await webhook_record(session, execution),
    }
