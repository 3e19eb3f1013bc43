"""Executions that end with a webhook to send, a clock the tests move, and the delivery rows."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import sqlalchemy as sa

from core.db import Database
from core.events import append_any_event
from core.ids import new_id
from core.models import Execution, WebhookAttempt, WebhookDelivery, utcnow
from core.settings import Settings
from core.webhook_secrets import signing_secrets
from tests.conftest import Account


@dataclass
class FakeClock:
    now: datetime

    def __call__(self) -> datetime:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += timedelta(seconds=seconds)


async def new_execution(
    db: Database, owner: Account, url: str | None, *, events: list[str] | None = None, status: str = "running"
) -> str:
    async with db.transaction() as session:
        execution = Execution(
            id=new_id("exe"),
            user_id=owner.user_id,
            api_key_id=owner.key_id,
            task_name="Hooked",
            task_description="Write a note saying hi.",
            test_mode="without-verification",
            webhook_url=url,
            webhook_events=events,
            agent_model="offline",
            status=status,
            created_at=utcnow(),
            last_seq=0,
            lease_epoch=0,
        )
        session.add(execution)
        return execution.id


async def finish(db: Database, execution_id: str, status: str = "completed", **values: Any) -> None:
    """End the execution as the runner does: the final state and its event in one transaction."""
    async with db.transaction() as session:
        await session.execute(
            sa.update(Execution)
            .where(Execution.id == execution_id)
            .values(status=status, completed_at=utcnow(), **values)
        )
        await append_any_event(session, execution_id, f"execution.{status}", {"status": status})


async def deliveries(db: Database, execution_id: str) -> list[WebhookDelivery]:
    async with db.reading() as session:
        return list(
            await session.scalars(
                sa.select(WebhookDelivery)
                .where(WebhookDelivery.execution_id == execution_id)
                .order_by(WebhookDelivery.created_at)
            )
        )


async def attempts(db: Database, delivery_id: str) -> list[WebhookAttempt]:
    async with db.reading() as session:
        return list(
            await session.scalars(
                sa.select(WebhookAttempt)
                .where(WebhookAttempt.delivery_id == delivery_id)
                .order_by(WebhookAttempt.number)
            )
        )


async def secrets_of(db: Database, settings: Settings, user_id: str) -> list[str]:
    async with db.reading() as session:
        return list((await signing_secrets(session, settings.secret_key, user_id)).signing)
