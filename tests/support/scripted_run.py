"""A run written straight into the database with chosen timestamps: what metrics and charts are checked against.

The script mirrors what the worker and review.decide write (see agents/runner.py and review/decisions.py), but
every moment is a fixed offset from T0, so every derived number is exact.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from core.db import Database
from core.ids import new_id
from core.models import Checkpoint, Decision, Event, Execution

T0 = datetime(2030, 1, 2, 3, 4, 5, tzinfo=UTC)


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


@dataclass
class Script:
    """Rows of one execution, added in order; `write` stores them in one transaction."""

    user_id: str
    task_name: str = "Scripted run"
    status: str = "completed"
    created: float = 0.0
    completed: float | None = 120.0
    webhook_url: str | None = None
    execution_id: str = field(default_factory=lambda: new_id("exe"))
    checkpoints: list[Checkpoint] = field(default_factory=list)
    decisions: list[Decision] = field(default_factory=list)
    events: list[tuple[float, str, dict[str, Any]]] = field(default_factory=list)

    def event(self, seconds: float, type_: str, **payload: Any) -> None:
        self.events.append((seconds, type_, payload))

    def checkpoint(self, stage: str, *, status: str = "pending", attempt: int = 1,
                   awaiting_since: float | None = None) -> str:
        checkpoint = Checkpoint(
            id=new_id("chk"),
            execution_id=self.execution_id,
            position=len(self.checkpoints),
            stage=stage,
            description="",
            verification_question=f"{stage}?",
            origin="caller",
            status=status,
            attempt=attempt,
            awaiting_since=at(awaiting_since) if awaiting_since is not None else None,
        )
        self.checkpoints.append(checkpoint)
        return checkpoint.id

    def wait(self, seconds: float, checkpoint_id: str, attempt: int) -> None:
        self.event(seconds, "checkpoint.awaiting_review", checkpointId=checkpoint_id, attempt=attempt)

    def decide(self, seconds: float, checkpoint_id: str, attempt: int, decision: str, *, via: str = "web",
               comment: str = "") -> None:
        self.decisions.append(
            Decision(
                id=new_id("dec"),
                checkpoint_id=checkpoint_id,
                attempt=attempt,
                execution_id=self.execution_id,
                decision=decision,
                decided_by="vouch" if via == "auto" else "rev@example.com",
                via=via,
                comment=comment,
                decided_at=at(seconds),
            )
        )
        self.event(seconds, "checkpoint.decided", checkpointId=checkpoint_id, decision=decision, attempt=attempt)

    def tool(self, seconds: float, tool: str, duration_ms: float, *, error: str | None = None) -> None:
        call_id = new_id("call")
        self.event(seconds, "tool.call", toolCallId=call_id, tool=tool, args={}, actsOnWorld=False)
        outcome: dict[str, Any] = {"error": error} if error else {"result": {"ok": True}}
        self.event(seconds + duration_ms / 1000, "tool.result", toolCallId=call_id, tool=tool,
                   durationMs=duration_ms, **outcome)

    def model(self, seconds: float, duration_ms: float, tokens_in: int, tokens_out: int,
              cost: float | None) -> None:
        self.event(seconds, "model.request", model="test:model", durationMs=duration_ms, inputTokens=tokens_in,
                   outputTokens=tokens_out, costUsd=cost, retries=0)

    async def write(self, db: Database) -> str:
        execution = Execution(
            id=self.execution_id,
            user_id=self.user_id,
            task_name=self.task_name,
            task_description="Scripted.",
            test_mode="with-verification",
            assigned_reviewer="rev@example.com",
            webhook_url=self.webhook_url,
            agent_model="offline",
            status=self.status,
            created_at=at(self.created),
            started_at=at(self.created + 1),
            completed_at=at(self.completed) if self.completed is not None else None,
            last_seq=len(self.events),
            lease_epoch=0,
        )
        async with db.transaction() as session:
            session.add(execution)
            await session.flush()
            session.add_all(self.checkpoints)
            await session.flush()
            session.add_all(self.decisions)
            for seq, (seconds, type_, payload) in enumerate(sorted(self.events, key=lambda e: e[0]), start=1):
                session.add(Event(execution_id=self.execution_id, seq=seq, type=type_, payload=payload,
                                  created_at=at(seconds)))
        return self.execution_id


def rejected_then_approved(user_id: str, *, task_name: str = "Scripted run") -> Script:
    """One checkpoint rejected once and then approved, a second passed automatically; two model requests,
    three tool calls (one failing). Its metrics are spelled out in tests/core/test_metrics.py."""
    script = Script(user_id, task_name=task_name)
    first = script.checkpoint("Draft", status="approved", attempt=2, awaiting_since=16)
    second = script.checkpoint("Send", status="auto_approved")
    script.event(1, "execution.started", worker="w1")
    script.event(1.25, "agent.message", text="plan")
    script.model(2, 700, 100, 20, 0.0012)
    script.tool(2.1, "write_file", 300.5)
    script.wait(3, first, 1)
    script.decide(13, first, 1, "reject", comment="shorter")
    script.event(13, "checkpoint.revision_requested", checkpointId=first, attempt=1, nextAttempt=2)
    script.event(14, "execution.resumed", worker="w2")
    script.model(15, 800, 200, 30, 0.0025)
    script.wait(16, first, 2)
    script.decide(46, first, 2, "approve")
    script.event(47, "execution.resumed", worker="w1")
    script.tool(48, "send_email", 1200, error="smtp refused")
    script.decide(50, second, 1, "approve", via="auto")
    script.tool(50, "write_file", 99.5)
    script.event(120, "execution.completed", status="completed")
    return script
