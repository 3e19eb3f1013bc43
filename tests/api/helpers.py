"""Shared helpers for the API tests: requests, waiting on executions, problem bodies."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any

import sqlalchemy as sa

from core.accounts import create_api_key, create_user, user_by_email
from core.models import MailMessage
from tests.conftest import Account, Service, bearer
from tests.support.waiting import channel_of, until

CREATE = "/api/eval/create-task-agent"
REVIEWER = "reviewer@example.com"


def status_path(execution_id: str) -> str:
    return f"/api/eval/status/{execution_id}"


def decision_path(execution_id: str, checkpoint_id: str) -> str:
    return f"/api/eval/executions/{execution_id}/checkpoints/{checkpoint_id}/decision"


def task(**fields: Any) -> dict[str, Any]:
    """A valid create body (no checkpoints, so no reviewer needed), with `fields` merged in."""
    body: dict[str, Any] = {"taskName": "Weekly digest", "taskDescription": "Write a note called digest.md saying hi."}
    body.update(fields)
    return body


async def create(service: Service, key: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    response = await service.client.post(CREATE, json=body, headers=bearer(key))
    return response.status_code, await response.get_json()


async def create_ok(service: Service, key: str, body: dict[str, Any]) -> str:
    code, payload = await create(service, key, body)
    assert code == 201, payload
    execution_id: str = payload["executionId"]
    return execution_id


async def get_status(service: Service, key: str, execution_id: str) -> dict[str, Any]:
    response = await service.client.get(status_path(execution_id), headers=bearer(key))
    payload: dict[str, Any] = await response.get_json()
    assert response.status_code == 200, payload
    return payload


async def wait_for(
    service: Service, key: str, execution_id: str, ready: Callable[[dict[str, Any]], bool], timeout: float = 15
) -> dict[str, Any]:
    """The status record once `ready(record)` holds, re-checked on every event of the execution."""
    seen: list[dict[str, Any]] = []

    async def check() -> dict[str, Any] | None:
        record = await get_status(service, key, execution_id)
        seen.append(record)
        return record if ready(record) else None

    try:
        return await until(check, bus=service.db.bus, channel=channel_of(execution_id), timeout=timeout)
    except AssertionError as exc:
        raise AssertionError(f"{exc}; last status: {seen[-1] if seen else None}") from None


def paused_at(position: int) -> Callable[[dict[str, Any]], bool]:
    def ready(record: dict[str, Any]) -> bool:
        assert record["status"] not in ("completed", "failed", "rejected"), record
        return bool(
            record["status"] == "awaiting_review" and record["checkpoints"][position]["status"] == "awaiting_review"
        )

    return ready


def has_status(*wanted: str) -> Callable[[dict[str, Any]], bool]:
    def ready(record: dict[str, Any]) -> bool:
        assert record["status"] != "failed", record
        return record["status"] in wanted

    return ready


async def decide(
    service: Service, key: str, execution_id: str, checkpoint_id: str, body: Any
) -> tuple[int, dict[str, Any]]:
    response = await service.client.post(decision_path(execution_id, checkpoint_id), json=body, headers=bearer(key))
    return response.status_code, await response.get_json()


async def account(service: Service, email: str, *scopes: str) -> Account:
    """A user (no password: hashing one costs a quarter second) with one key of `scopes`."""
    async with service.db.transaction() as session:
        user = await create_user(session, email)
        new = await create_api_key(
            session, user, name="test", scopes=list(scopes), secret_key=service.settings.secret_key
        )
        return Account(user.email, user.id, new.secret, new.record.id, tuple(new.record.scopes))


async def add_key(service: Service, email: str, *scopes: str) -> tuple[str, str]:
    """Another key for an existing user: (key id, secret)."""
    async with service.db.transaction() as session:
        user = await user_by_email(session, email)
        assert user is not None
        new = await create_api_key(
            session, user, name="extra", scopes=list(scopes), secret_key=service.settings.secret_key
        )
        return new.record.id, new.secret


async def mail_to(service: Service, execution_id: str) -> list[str]:
    """Recipients of every message the execution's agent sent (its tools' outbox rows; the review mail to
    the reviewer is not the agent's doing)."""
    async with service.db.reading() as session:
        rows = await session.scalars(
            sa.select(MailMessage.recipient).where(
                MailMessage.execution_id == execution_id, MailMessage.message_key.like("tool:%")
            )
        )
        return sorted(rows)


def assert_problem(response: Any, payload: dict[str, Any], status: int, code: str, title: str | None = None) -> None:
    assert response.status_code == status, payload
    assert response.mimetype == "application/problem+json", response.headers
    assert payload["success"] is False
    assert payload["status"] == status
    assert payload["code"] == code, payload
    assert isinstance(payload["detail"], str) and payload["detail"]
    assert isinstance(payload["type"], str) and payload["type"]
    assert isinstance(payload["title"], str) and payload["title"]
    if title is not None:
        assert payload["title"] == title


def parse_time(value: str) -> datetime:
    assert value.endswith("Z"), value
    return datetime.fromisoformat(value.replace("Z", "+00:00"))
