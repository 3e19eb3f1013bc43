"""Webhooks as operators run the service: `vouch serve` / `vouch worker` processes, a real receiver that
verifies with the `standardwebhooks` library, the secret from `vouch webhooks secret`, and a receiver that is
down while the process restarts."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import sqlalchemy as sa

from core.bus import InProcessBus
from core.db import Database
from core.models import WebhookAttempt, WebhookDelivery, utcnow
from core.settings import Settings
from tests.support.live import HTTP_TIMEOUT
from tests.support.ports import free_port
from tests.support.processes import VOUCH, run_vouch, running, running_worker, vouch_env, wait_until_healthy
from tests.support.waiting import until
from tests.support.webhook_receiver import webhook_receiver

TASK = 'Write a note called "hi.md" saying "hi". Then summarise.'
ALLOW = {"VOUCH_WEBHOOK_ALLOWLIST": "127.0.0.1/32"}


def _account(settings: Settings) -> str:
    assert run_vouch(settings, "users", "create", "op@example.com").returncode == 0
    made = run_vouch(settings, "keys", "create", "op@example.com", "--name", "n", "--scope", "eval:manage")
    assert made.returncode == 0, made.stderr
    return made.stdout.strip()


def _secret(settings: Settings, *flags: str) -> str:
    shown = run_vouch(settings, "webhooks", "secret", "op@example.com", *flags)
    assert shown.returncode == 0, shown.stderr
    secret = shown.stdout.strip()
    assert secret.startswith("whsec_")
    return secret


async def _create(base: str, key: str, url: str) -> str:
    async with httpx.AsyncClient(
        timeout=HTTP_TIMEOUT, base_url=base, headers={"Authorization": f"Bearer {key}"}
    ) as client:
        created = await client.post(
            "/api/eval/create-task-agent",
            json={"taskName": "hooked", "taskDescription": TASK, "testMode": "without-verification", "webhookUrl": url},
        )
    assert created.status_code == 201, created.text
    execution_id: str = created.json()["executionId"]
    return execution_id


async def _status(base: str, key: str, execution_id: str) -> dict[str, Any]:
    async with httpx.AsyncClient(
        timeout=HTTP_TIMEOUT, base_url=base, headers={"Authorization": f"Bearer {key}"}
    ) as client:
        record: dict[str, Any] = (await client.get(f"/api/eval/status/{execution_id}")).json()
    return record


async def test_a_finished_run_posts_a_signed_completion_and_logs_it(settings: Settings, tmp_path: Path) -> None:
    key = _account(settings)
    old = _secret(settings)
    assert _secret(settings) == old  # derived, stable
    new = _secret(settings, "--rotate")
    assert new != old
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    log_path = tmp_path / "serve.log"
    async with webhook_receiver([old, new]) as receiver:
        with running([VOUCH, "serve", "--port", str(port)], vouch_env(settings, **ALLOW), log_path) as proc:
            await wait_until_healthy(base, proc, log_path)
            execution_id = await _create(base, key, receiver.url)
            [request] = await until(lambda: receiver.count(1), timeout=30)

            async def logged() -> dict[str, Any] | None:
                record = await _status(base, key, execution_id)
                deliveries = record["webhook"]["deliveries"]
                return record if deliveries and deliveries[0]["status"] == "succeeded" else None

            record = await until(logged, timeout=15)
    assert request.verified_with == [0, 1]  # during the rotation both secrets sign
    body = receiver.payloads()[0]
    assert body["type"] == "execution.completed"
    assert body["data"]["executionId"] == execution_id and body["data"]["status"] == "completed"
    assert body["data"]["metrics"]["steps"] >= 1
    assert record["webhook"]["url"] == receiver.url
    [delivery] = record["webhook"]["deliveries"]
    assert delivery["webhookId"] == request.webhook_id
    [attempt] = delivery["attempts"]
    assert attempt["statusCode"] == 200 and attempt["latencyMs"] >= 0 and attempt["response"] == "ok"


async def test_a_receiver_down_across_a_restart_still_gets_its_delivery(settings: Settings, tmp_path: Path) -> None:
    key = _account(settings)
    secret = _secret(settings)
    hook_port = free_port()  # nothing listens there yet: the receiver is down
    url = f"http://127.0.0.1:{hook_port}/hook"
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    log_path = tmp_path / "serve.log"
    db = Database(settings.database_url, InProcessBus())
    try:

        async def first_attempt_failed() -> WebhookDelivery | None:
            async with db.reading() as session:
                delivery = await session.scalar(sa.select(WebhookDelivery))
                done = delivery is not None and delivery.attempts == 1 and delivery.locked_until is None
                return delivery if done else None

        with running([VOUCH, "serve", "--port", str(port)], vouch_env(settings, **ALLOW), log_path) as proc:
            await wait_until_healthy(base, proc, log_path)
            await _create(base, key, url)
            failed = await until(first_attempt_failed, timeout=30)
        assert failed.status == "pending"  # the process is gone; the row waits for the next one
        assert failed.next_attempt_at is not None
        # The first retry is due 5 s (±10 %) after the failure; the outage outlasts it. Time passes in the row, not
        # in the test: the next process finds the retry due as it would after a longer outage.
        async with db.transaction() as session:
            await session.execute(sa.update(WebhookDelivery).values(next_attempt_at=utcnow()))

        async with webhook_receiver([secret], port=hook_port) as receiver:
            with running_worker(settings, "worker", **ALLOW):
                [request] = await until(lambda: receiver.count(1), timeout=30)

                async def succeeded() -> list[WebhookAttempt] | None:
                    async with db.reading() as session:
                        status = await session.scalar(sa.select(WebhookDelivery.status))
                        rows = list(await session.scalars(sa.select(WebhookAttempt).order_by(WebhookAttempt.number)))
                    return rows if status == "succeeded" else None

                log = await until(succeeded, timeout=15)
        assert request.webhook_id == failed.id and request.verified_with == [0]
        assert [(a.number, a.status_code) for a in log] == [(1, None), (2, 200)]
        assert log[0].error is not None
    finally:
        await db.dispose()
