"""A decision as every channel shows it, and reading the decisions of a checkpoint."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncSession

from core.event_payloads import DecisionJson
from core.formatting import isoformat
from core.models import Decision


@dataclass(frozen=True)
class DecisionRecord:
    checkpoint_id: str
    decision: str
    by: str
    via: str
    at: datetime
    comment: str
    attempt: int = 1
    remote_addr: str | None = None
    # An approval with edited arguments: all the arguments proposed, and those the reviewer changed.
    original_args: dict[str, Any] | None = None
    edited_args: dict[str, Any] | None = None
    rating: int | None = None
    labels: list[str] | None = None

    def as_json(self) -> DecisionJson:
        # The request address stays out of this shape: it goes into events, which view-link holders see.
        return {
            "decision": self.decision,
            "by": self.by,
            "via": self.via,
            "at": isoformat(self.at),
            "comment": self.comment,
            "attempt": self.attempt,
            "originalArgs": self.original_args,
            "editedArgs": self.edited_args,
            "rating": self.rating,
            "labels": self.labels,
        }

    @classmethod
    def of(cls, row: Decision) -> DecisionRecord:
        return cls(
            row.checkpoint_id,
            row.decision,
            row.decided_by,
            row.via,
            row.decided_at,
            row.comment,
            row.attempt,
            row.remote_addr,
            row.original_args,
            row.edited_args,
            row.rating,
            list(row.labels) if row.labels is not None else None,
        )


async def decision_for(session: AsyncSession, checkpoint_id: str, attempt: int | None = None) -> DecisionRecord | None:
    """The decision on `attempt` of a checkpoint, or on its latest decided attempt."""
    query = sa.select(Decision).where(Decision.checkpoint_id == checkpoint_id)
    if attempt is not None:
        query = query.where(Decision.attempt == attempt)
    row = await session.scalar(query.order_by(Decision.attempt.desc()).limit(1))
    return DecisionRecord.of(row) if row is not None else None


async def decision_history(session: AsyncSession, checkpoint_id: str) -> list[DecisionRecord]:
    rows = await session.scalars(
        sa.select(Decision).where(Decision.checkpoint_id == checkpoint_id).order_by(Decision.attempt)
    )
    return [DecisionRecord.of(row) for row in rows]
