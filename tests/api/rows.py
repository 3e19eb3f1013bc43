"""Executions written straight into the database in a chosen state, for tests about the API around them."""

from __future__ import annotations

from datetime import datetime

from core.db import Database
from core.ids import new_id
from core.models import Checkpoint, Execution, utcnow
from core.vocabulary import FINAL as FINAL_STATUSES
from tests.conftest import Account


async def insert_execution(
    db: Database,
    owner: Account,
    *,
    status: str = "queued",
    created_at: datetime | None = None,
    reviewer: str | None = None,
    checkpoints: int = 0,
    awaiting: bool = False,
    task_name: str = "Inserted",
    agent_model: str = "offline",
) -> tuple[str, list[str]]:
    """An execution of `owner` with `checkpoints` caller checkpoints; with `awaiting`, paused at the first
    (as the worker leaves it). Returns (execution id, checkpoint ids)."""
    now = utcnow()
    execution = Execution(
        id=new_id("exe"),
        user_id=owner.user_id,
        api_key_id=owner.key_id,
        task_name=task_name,
        task_description="Write a note called a.md saying hi.",
        test_mode="with-verification",
        assigned_reviewer=reviewer,
        agent_model=agent_model,
        status="awaiting_review" if awaiting else status,
        created_at=created_at or now,
        completed_at=now if status in FINAL_STATUSES else None,
        last_seq=0,
        lease_epoch=0,
    )
    ids: list[str] = []
    async with db.transaction() as session:
        session.add(execution)
        await session.flush()
        for position in range(checkpoints):
            checkpoint = Checkpoint(
                id=new_id("chk"),
                execution_id=execution.id,
                position=position,
                stage=f"stage {position}",
                description="",
                verification_question="Go on?",
                origin="caller",
                status="awaiting_review" if awaiting and position == 0 else "pending",
                awaiting_since=now if awaiting and position == 0 else None,
            )
            session.add(checkpoint)
            ids.append(checkpoint.id)
    return execution.id, ids
