"""The rate limit across processes: two `vouch web` processes sharing Redis give one key one budget of 100."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import httpx
import redis.asyncio as aioredis
import sqlalchemy as sa

from api.ratelimit import REDIS_PREFIX
from core.db import Database
from core.models import ApiKey
from core.settings import Settings
from tests.support.ports import free_port
from tests.support.processes import VOUCH, run_vouch, running, vouch_env, wait_until_healthy
from tests.support.ratelimits import REDIS_URL

TASK = {
    "taskName": "limits",
    "taskDescription": "Write a note called a.md saying hi.",
    "testMode": "without-verification",
}
# The spec's 100 requests, over an hour instead of a minute: one request comes back only after 36 s, far
# longer than the test takes, so the count is exact under real time (the minute's arithmetic has its own tests).
WINDOW_SECONDS = 3600


async def test_two_web_processes_share_one_budget_of_100(settings: Settings, db: Database, tmp_path: Path) -> None:
    assert run_vouch(settings, "users", "create", "op@example.com").returncode == 0
    made = run_vouch(settings, "keys", "create", "op@example.com", "--name", "n", "--scope", "eval:manage")
    assert made.returncode == 0, made.stderr
    key = made.stdout.strip()
    async with db.reading() as session:
        key_id = await session.scalar(sa.select(ApiKey.id))
    env = vouch_env(settings, VOUCH_REDIS_URL=REDIS_URL, VOUCH_RATE_LIMIT_WINDOW_SECONDS=str(WINDOW_SECONDS))
    ports = (free_port(), free_port())
    bases = [f"http://127.0.0.1:{port}" for port in ports]
    logs = [tmp_path / "web-a.log", tmp_path / "web-b.log"]
    redis = aioredis.Redis.from_url(REDIS_URL)
    try:
        with (
            running([VOUCH, "web", "--port", str(ports[0])], env, logs[0]) as web_a,
            running([VOUCH, "web", "--port", str(ports[1])], env, logs[1]) as web_b,
        ):
            await wait_until_healthy(bases[0], web_a, logs[0])
            await wait_until_healthy(bases[1], web_b, logs[1])
            async with httpx.AsyncClient(headers={"Authorization": f"Bearer {key}"}, timeout=30) as client:
                started = time.monotonic()
                created = await client.post(f"{bases[0]}/api/eval/create-task-agent", json=TASK)
                assert created.status_code == 201, created.text
                status_path = f"/api/eval/status/{created.json()['executionId']}"
                # The other 149 at once, alternating between the processes (B, A, B, ...).
                looks = await asyncio.gather(*(client.get(bases[(n + 1) % 2] + status_path) for n in range(149)))
                elapsed = time.monotonic() - started
    finally:
        await redis.delete(REDIS_PREFIX + str(key_id))
        await redis.aclose()

    answers = [created, *looks]
    assert elapsed < WINDOW_SECONDS / 100, "a request came back during the test: the count is no longer exact"
    codes = [a.status_code for a in answers]
    # Each process got 75 requests: with budgets of their own, all 150 would have passed.
    assert (codes.count(201) + codes.count(200), codes.count(429)) == (100, 50), codes
    succeeded = [a for a in answers if a.status_code != 429]
    refused = [a for a in answers if a.status_code == 429]
    # One shared budget: every remaining count from 99 down to 0 was handed out exactly once.
    assert sorted(int(a.headers["X-RateLimit-Remaining"]) for a in succeeded) == list(range(100))
    assert {a.headers["RateLimit-Policy"] for a in answers} == {f'"default";q=100;w={WINDOW_SECONDS}'}
    for answer in refused:
        assert answer.json()["code"] == "rate_limit_exceeded"
        assert int(answer.headers["Retry-After"]) >= 1
