"""The outbound allow-lists as `vouch` reads them at start-up: the agent never reaches the service's own
port, the old variable still serves webhooks and warns once, and a bad entry stops the start with why."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx

from core.settings import Settings
from tests.support.fake_llm import call, fake_llm, last_tool_result
from tests.support.hello_server import hello_server
from tests.support.live import HTTP_TIMEOUT
from tests.support.ports import free_port
from tests.support.processes import START_TIMEOUT, VOUCH, run_vouch, running, vouch_env, wait_until_healthy
from tests.support.waiting import until

DEPRECATED = "VOUCH_OUTBOUND_ALLOWLIST is deprecated"


async def test_vouch_serve_keeps_the_agent_off_its_own_port_and_warns_once_of_the_old_variable(
    settings: Settings, tmp_path: Path
) -> None:
    assert run_vouch(settings, "users", "create", "op@example.com").returncode == 0
    made = run_vouch(settings, "keys", "create", "op@example.com", "--name", "n", "--scope", "eval:manage")
    assert made.returncode == 0, made.stderr
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    log_path = tmp_path / "serve.log"
    async with (
        hello_server() as other,
        fake_llm(
            call("http_request", method="GET", url=f"{base}/metrics"),
            call("http_request", method="GET", url=f"{other}/"),
            call("finish", summary="done"),
        ) as llm,
    ):
        env = vouch_env(
            settings,
            VOUCH_AGENT_MODEL="openai:scripted",
            VOUCH_AGENT_BASE_URL=llm.base_url,
            VOUCH_AGENT_HTTP_ALLOWLIST="127.0.0.0/8",  # loopback, every port: still not the service's own
            VOUCH_OUTBOUND_ALLOWLIST="127.0.0.1/32",
        )
        with running([VOUCH, "serve", "--port", str(port)], env, log_path) as proc:
            await wait_until_healthy(base, proc, log_path)
            async with httpx.AsyncClient(
                timeout=HTTP_TIMEOUT, base_url=base, headers={"Authorization": f"Bearer {made.stdout.strip()}"}
            ) as c:
                created = await c.post(
                    "/api/eval/create-task-agent",
                    json={"taskName": "own", "taskDescription": "Fetch metrics.", "testMode": "without-verification"},
                )
                assert created.status_code == 201, created.text
                execution_id = created.json()["executionId"]

                async def finished() -> dict[str, Any] | None:
                    body: dict[str, Any] = (await c.get(f"/api/eval/status/{execution_id}")).json()
                    return body if body["status"] in ("completed", "failed") else None

                done = await until(finished, timeout=30)
    assert done["status"] == "completed", done
    own = json.loads(last_tool_result(llm.requests[1]))
    assert own["error"].startswith("refused:") and "the service's own" in own["error"], own
    assert json.loads(last_tool_result(llm.requests[2]))["status"] == 200  # the allow-list itself works
    logged = log_path.read_text()
    assert logged.count(DEPRECATED) == 1, logged


def test_a_bad_allow_list_entry_stops_the_start_with_why(settings: Settings) -> None:
    for command in (["worker"], ["serve", "--port", str(free_port())]):
        ran = run_vouch(settings, *command, VOUCH_AGENT_HTTP_ALLOWLIST="127.0.0.1:99999")
        assert ran.returncode != 0
        assert "VOUCH_AGENT_HTTP_ALLOWLIST: '127.0.0.1:99999'" in ran.stderr and "65535" in ran.stderr, ran.stderr


async def test_the_old_variable_warns_at_the_start_of_a_worker(settings: Settings, tmp_path: Path) -> None:
    log_path = tmp_path / "worker.log"
    with running([VOUCH, "worker"], vouch_env(settings, VOUCH_OUTBOUND_ALLOWLIST="127.0.0.1"), log_path) as proc:

        async def started() -> bool | None:
            assert proc.poll() is None, log_path.read_text()
            return True if " started" in log_path.read_text() else None

        await until(started, timeout=START_TIMEOUT)  # the warning comes before
    logged = log_path.read_text()
    assert logged.count(DEPRECATED) == 1 and "VOUCH_WEBHOOK_ALLOWLIST" in logged, logged
