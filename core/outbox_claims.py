"""Claiming the next due row of an outbox table under a lease: webhook deliveries and trace exports alike."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any, TypeVar

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncSession

from core.backends.base import Backend
from core.models import TraceExport, WebhookDelivery

Row = TypeVar("Row", WebhookDelivery, TraceExport)


async def claim_next_due(
    session: AsyncSession, backend: Backend, table: type[Row], now: datetime, lease: timedelta
) -> Row | None:
    """The oldest pending row whose attempt is due and whose lease (if any) has lapsed, leased to the caller."""
    due = due_rows(table, now).order_by(table.next_attempt_at).limit(1)
    claimed: Row | None = await session.scalar(
        sa.update(table)
        .where(table.id == backend.skip_locked(due).scalar_subquery())
        .values(attempts=table.attempts + 1, locked_until=now + lease)
        .returning(table),
        execution_options={"synchronize_session": False},
    )
    return claimed


def due_rows(table: type[Row], now: datetime | sa.BindParameter[Any]) -> sa.Select[str]:
    """The ids of the pending rows whose attempt is due at `now` and whose lease (if any) has lapsed."""
    return sa.select(table.id).where(
        table.status == "pending",
        table.next_attempt_at <= now,
        sa.or_(table.locked_until.is_(None), table.locked_until < now),
    )
