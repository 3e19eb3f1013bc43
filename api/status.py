"""The status record of an execution, built from its rows and events."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncSession

from core.events import isoformat
from core.models import Checkpoint, Decision, Event, Execution, utcnow
from review import DecisionRecord


def _ms(start: datetime | None, end: datetime | None) -> int | None:
    if start is None or end is None:
        return None
    return max(0, round((end - start).total_seconds() * 1000))


async def metrics(
    session: AsyncSession, execution: Execution, checkpoints: Sequence[tuple[Checkpoint, Decision | None]]
) -> dict[str, Any]:
    now = utcnow()
    rows = (
        await session.execute(
            sa.select(Event.type, Event.payload).where(
                Event.execution_id == execution.id, Event.type.in_(("tool.call", "tool.result"))
            )
        )
    ).all()
    agent_ms = sum(float(payload.get("durationMs", 0)) for type_, payload in rows if type_ == "tool.result")
    review_wait = sum(
        # A wait with no decision ends when the execution does (a cancelled one stops the clock).
        _ms(cp.awaiting_since, decision.decided_at if decision else (execution.completed_at or now)) or 0
        for cp, decision in checkpoints
        if cp.awaiting_since is not None
    )
    return {
        "durationMs": _ms(execution.created_at, execution.completed_at or now),
        "agentMs": round(agent_ms),
        "reviewWaitMs": review_wait,
        "steps": sum(1 for type_, _ in rows if type_ == "tool.result"),
        "toolCalls": sum(1 for type_, _ in rows if type_ == "tool.call"),
    }


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
    }
