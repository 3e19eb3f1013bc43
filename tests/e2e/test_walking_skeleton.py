"""The whole path over real HTTP: a key made with the CLI, executions run to completion."""

from __future__ import annotations

from typing import Any

import httpx

from core.settings import Settings
from tests.support.live import HTTP_TIMEOUT, live_server
from tests.support.processes import run_vouch
from tests.support.waiting import until

TASK = (
    'Write a note called "plan.md" saying "Checklist ready". '
    'Then send an email to ops@example.com with subject "Release notes" and body "Version 2 is out". '
    "Then summarise the work."
)


async def _status_when(client: httpx.AsyncClient, execution_id: str, *statuses: str) -> dict[str, Any]:
    async def check() -> dict[str, Any] | None:
        response = await client.get(f"/api/eval/status/{execution_id}")
        assert response.status_code == 200, response.text
        body: dict[str, Any] = response.json()
        return body if body["status"] in statuses else None

    return await until(check, timeout=20)


async def test_cli_key_drives_two_executions_over_http(settings: Settings) -> None:
    assert run_vouch(settings, "users", "create", "eve@example.com").returncode == 0
    made = run_vouch(settings, "keys", "create", "eve@example.com", "--name", "e2e", "--scope", "eval:manage")
    assert made.returncode == 0, made.stderr
    key = made.stdout.strip()
    assert made.stdout == key + "\n" and len(key) == 41

    with live_server(settings, run_worker=True) as base:
        async with httpx.AsyncClient(
            timeout=HTTP_TIMEOUT, base_url=base, headers={"Authorization": f"Bearer {key}"}
        ) as client:
            plain = await client.post(
                "/api/eval/create-task-agent",
                json={"taskName": "no review", "taskDescription": TASK, "testMode": "without-verification"},
            )
            assert plain.status_code == 201, plain.text
            done = await _status_when(client, plain.json()["executionId"], "completed", "failed")
            assert done["status"] == "completed", done
            assert "ops@example.com" in done["result"]["summary"]
            assert done["metrics"]["steps"] == 3

            reviewed = await client.post(
                "/api/eval/create-task-agent",
                json={
                    "taskName": "reviewed",
                    "taskDescription": TASK,
                    "testMode": "with-verification",
                    "assignedReviewer": "eve@example.com",
                    "checkpoints": [
                        {"stage": "Draft", "description": "The note", "verificationQuestion": "Is the note right?"},
                        {"stage": "Send", "description": "E-mail to ops", "verificationQuestion": "Send it?"},
                    ],
                },
            )
            assert reviewed.status_code == 201, reviewed.text
            created = reviewed.json()
            assert created["checkpointCount"] == 2
            execution_id = created["executionId"]
            for expected_stage in ("Draft", "Send"):
                paused = await _status_when(client, execution_id, "awaiting_review", "failed", "completed")
                assert paused["status"] == "awaiting_review", paused
                waiting = [cp for cp in paused["checkpoints"] if cp["status"] == "awaiting_review"]
                assert [cp["stage"] for cp in waiting] == [expected_stage]
                decided = await client.post(
                    f"/api/eval/executions/{execution_id}/checkpoints/{waiting[0]['checkpointId']}/decision",
                    json={"decision": "approve", "comment": f"{expected_stage} looks right"},
                )
                assert decided.status_code == 200, decided.text
                # The next poll must not see the checkpoint it just approved as still waiting.
                await _status_when_not_waiting_on(client, execution_id, waiting[0]["checkpointId"])

            final = await _status_when(client, execution_id, "completed", "failed", "rejected")
            assert final["status"] == "completed", final
            assert [(cp["status"], cp["decision"]["via"]) for cp in final["checkpoints"]] == [
                ("approved", "api"),
                ("approved", "api"),
            ]
            assert final["metrics"]["reviewWaitMs"] > 0
            assert final["completedAt"] is not None


async def _status_when_not_waiting_on(client: httpx.AsyncClient, execution_id: str, checkpoint_id: str) -> None:
    async def check() -> bool | None:
        body = (await client.get(f"/api/eval/status/{execution_id}")).json()
        states = {cp["checkpointId"]: cp["status"] for cp in body["checkpoints"]}
        moved_on = states[checkpoint_id] == "approved" and (
            body["status"] != "awaiting_review" or any(s == "awaiting_review" for s in states.values())
        )
        return True if moved_on else None

    await until(check, timeout=20)
