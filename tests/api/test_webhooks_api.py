"""The webhook parts of the REST API: `webhookEvents` on create, the delivery log in the status record and
`POST /api/eval/executions/<id>/webhook/redeliver` (its scopes and other users are in the authorization matrix)."""

from __future__ import annotations

import sqlalchemy as sa

from core.models import Execution, WebhookDelivery
from tests.api.helpers import CREATE, account, assert_problem, create_ok, status_path, task
from tests.api.rows import insert_execution
from tests.conftest import Service, bearer
from tests.core.webhook_support import finish


def redeliver_path(execution_id: str) -> str:
    return f"/api/eval/executions/{execution_id}/webhook/redeliver"


async def test_webhook_events_are_validated_and_stored(api_only: Service) -> None:
    owner = await account(api_only, "owner@example.com", "eval:manage")
    body = task(webhookUrl="https://hooks.example.com/x", webhookEvents=["checkpoint.decided"])
    execution_id = await create_ok(api_only, owner.key, body)
    async with api_only.db.reading() as session:
        stored = await session.scalar(sa.select(Execution.webhook_events).where(Execution.id == execution_id))
    assert stored == ["checkpoint.decided"]
    for bad in (["execution.completed"], ["checkpoint.decided", "checkpoint.decided"], "checkpoint.decided"):
        response = await api_only.client.post(CREATE, json=task(webhookEvents=bad), headers=bearer(owner.key))
        payload = await response.get_json()
        assert_problem(response, payload, 422, "validation_failed")
        assert payload["errors"][0]["pointer"].startswith("/webhookEvents")


async def test_the_status_record_carries_the_delivery_log_and_redeliver_adds_to_it(api_only: Service) -> None:
    owner = await account(api_only, "owner@example.com", "eval:manage")
    execution_id = await create_ok(api_only, owner.key, task(webhookUrl="https://hooks.example.com/x"))
    record = await (await api_only.client.get(status_path(execution_id), headers=bearer(owner.key))).get_json()
    assert record["webhook"] == {"url": "https://hooks.example.com/x", "deliveries": []}

    early = await api_only.client.post(redeliver_path(execution_id), headers=bearer(owner.key))
    assert_problem(early, await early.get_json(), 409, "execution_not_finished")

    await finish(api_only.db, execution_id)
    response = await api_only.client.post(redeliver_path(execution_id), headers=bearer(owner.key))
    answer = await response.get_json()
    assert response.status_code == 202, answer
    assert answer["success"] is True and answer["executionId"] == execution_id
    record = await (await api_only.client.get(status_path(execution_id), headers=bearer(owner.key))).get_json()
    deliveries = record["webhook"]["deliveries"]
    assert [(d["type"], d["status"], d["attempts"]) for d in deliveries] == [
        ("execution.completed", "pending", []),
        ("execution.completed", "pending", []),
    ]
    assert deliveries[1]["webhookId"] == answer["webhookId"] != deliveries[0]["webhookId"]
    assert deliveries[0]["nextAttemptAt"] is not None


async def test_redeliver_refusals(api_only: Service) -> None:
    owner = await account(api_only, "owner@example.com", "eval:manage")
    other = await account(api_only, "other@example.com", "eval:manage")
    reader = await account(api_only, "reader@example.com", "eval:read")
    no_hook, _ = await insert_execution(api_only.db, owner, status="completed")
    response = await api_only.client.post(redeliver_path(no_hook), headers=bearer(owner.key))
    assert_problem(response, await response.get_json(), 409, "webhook_not_configured")
    response = await api_only.client.post(redeliver_path(no_hook), headers=bearer(other.key))
    assert_problem(response, await response.get_json(), 404, "not_found")
    response = await api_only.client.post(redeliver_path("exe_unknown"), headers=bearer(owner.key))
    assert_problem(response, await response.get_json(), 404, "not_found")
    response = await api_only.client.post(redeliver_path(no_hook), headers=bearer(reader.key))
    assert_problem(response, await response.get_json(), 403, "insufficient_scope")
    async with api_only.db.reading() as session:
        assert await session.scalar(sa.select(sa.func.count()).select_from(WebhookDelivery)) == 0
