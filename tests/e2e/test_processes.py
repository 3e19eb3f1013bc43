"""The service as operators start it: `vouch serve` alone, and `vouch web` + `vouch worker` over Redis."""

from __future__ import annotations

import subprocess
import uuid
from pathlib import Path
from typing import Any

import httpx
import redis.asyncio as aioredis

from core.settings import Settings
from tests.support.live import HTTP_TIMEOUT
from tests.support.ports import free_port
from tests.support.processes import VOUCH, run_vouch, running, running_worker, vouch_env, wait_until_healthy
from tests.support.waiting import until

TASK = 'Write a note saying "hi". Then send an email to x@example.com with subject "Hello" saying "hi". Then summarise.'


async def _run_to_completion(base: str, key: str) -> dict[str, Any]:
    async with httpx.AsyncClient(
        timeout=HTTP_TIMEOUT, base_url=base, headers={"Authorization": f"Bearer {key}"}
    ) as client:
        created = await client.post(
            "/api/eval/create-task-agent",
            json={"taskName": "proc", "taskDescription": TASK, "testMode": "without-verification"},
        )
        assert created.status_code == 201, created.text
        execution_id = created.json()["executionId"]

        async def finished() -> dict[str, Any] | None:
            body: dict[str, Any] = (await client.get(f"/api/eval/status/{execution_id}")).json()
            return body if body["status"] in ("completed", "failed") else None

        return await until(finished, timeout=20)


async def test_vouch_serve_migrates_an_empty_embedded_database_and_runs_tasks(tmp_path: Path) -> None:
    data_dir = tmp_path / "fresh"
    settings = Settings(data_dir=data_dir, database_url=f"sqlite+aiosqlite:///{data_dir}/vouch.sqlite3", secret_key=b"")
    env = {k: v for k, v in vouch_env(settings).items() if k not in ("VOUCH_DATABASE_URL", "VOUCH_SECRET_KEY")}
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    log_path = tmp_path / "serve.log"
    with running([VOUCH, "serve", "--port", str(port)], env, log_path) as proc:
        await wait_until_healthy(base, proc, log_path)
        assert (data_dir / "vouch.sqlite3").exists() and (data_dir / "secret_key").stat().st_mode & 0o777 == 0o600
        for args in (("users", "create", "op@example.com"),):
            assert subprocess.run([VOUCH, *args], env=env, capture_output=True).returncode == 0
        made = subprocess.run(
            [VOUCH, "keys", "create", "op@example.com", "--name", "n", "--scope", "eval:manage"],
            env=env, capture_output=True, text=True,
        )  # fmt: skip
        assert made.returncode == 0, made.stderr
        done = await _run_to_completion(base, made.stdout.strip())
    assert done["status"] == "completed", done
    assert done["chatUrl"].startswith(f"{base}/chat/{done['executionId']}?token=")
    # One access line per request, ours (with the request's id and time), not uvicorn's beside it.
    # The start-up log names the default agent for what it is, and how to use a model instead.
    said = log_path.read_text()
    assert "Default agent: offline (rule-based, no language model)" in said and "VOUCH_AGENT_MODEL" in said, said
    logged = [line for line in log_path.read_text().splitlines() if "POST /api/eval/create-task-agent" in line]
    assert len(logged) == 1 and " 201 " in logged[0] and logged[0].endswith("from 127.0.0.1"), logged


async def test_separate_web_and_worker_processes_meet_through_redis(settings: Settings, tmp_path: Path) -> None:
    assert run_vouch(settings, "users", "create", "op@example.com").returncode == 0
    key = run_vouch(
        settings, "keys", "create", "op@example.com", "--name", "n", "--scope", "eval:manage"
    ).stdout.strip()
    # A poll far longer than the test's patience: only the Redis wake-up can make the run finish in time.
    extra = {"VOUCH_REDIS_URL": "redis://127.0.0.1:6379/0", "VOUCH_WORKER_POLL_SECONDS": "60"}
    # The worker's connections carry a name of their own: Redis's clients are every test's at once (pub/sub knows
    # no databases), so only that name tells this worker's subscription from the others'.
    worker_name = f"vouch-e2e-worker-{uuid.uuid4().hex}"
    worker_extra = {**extra, "VOUCH_REDIS_URL": f"{extra['VOUCH_REDIS_URL']}?client_name={worker_name}"}
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    log_path = tmp_path / "web.log"
    redis = aioredis.Redis.from_url(extra["VOUCH_REDIS_URL"])

    async def worker_listening() -> bool | None:
        # Workers listen by pattern (PSUBSCRIBE), which PUBSUB NUMSUB does not count: CLIENT LIST shows it.
        clients = await redis.client_list()
        subscribed = [c for c in clients if c.get("name") == worker_name and int(c.get("psub", 0)) > 0]
        return True if subscribed else None

    try:
        with (
            running_worker(settings, "worker", **worker_extra),
            running([VOUCH, "web", "--port", str(port)], vouch_env(settings, **extra), log_path) as web,
        ):
            await wait_until_healthy(base, web, log_path)
            await until(worker_listening, timeout=20)
            done = await _run_to_completion(base, key)
    finally:
        await redis.aclose()
    assert done["status"] == "completed", done
    assert done["metrics"]["steps"] == 3
