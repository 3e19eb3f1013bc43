"""GET /api/eval/status/<id>: the record, a fully automated run, and who may see it."""

from __future__ import annotations

from typing import Any

from tests.api.helpers import (
    REVIEWER,
    account,
    assert_problem,
    create,
    create_ok,
    get_status,
    has_status,
    mail_to,
    parse_time,
    status_path,
    wait_for,
)
from tests.conftest import Service, bearer

RECORD_KEYS = {
    "success",
    "executionId",
    "taskName",
    "status",
    "testMode",
    "assignedReviewer",
    "agentModel",
    "agent",
    "autoDetectCheckpoints",
    "chatUrl",
    "createdAt",
    "startedAt",
    "completedAt",
    "checkpointCount",
    "checkpoints",
    "result",
    "error",
    "metrics",
    "webhook",
    "expected",
    "scorers",
    "verdict",
}
CHECKPOINT_KEYS = {
    "checkpointId",
    "attempt",
    "attempts",
    "stage",
    "description",
    "verificationQuestion",
    "origin",
    "status",
    "awaitingSince",
    "nextAction",
    "decision",
}
METRIC_KEYS = {"durationMs", "agentMs", "reviewWaitMs", "steps", "toolCalls"}

TWO_STEPS = (
    'Write a note called plan.md saying "ship it". '
    'Then send an email to bob@example.com with subject "Done" saying "all good".'
)
CHECKPOINTS = [
    {"stage": "Draft note", "description": "The plan is written", "verificationQuestion": "Write the note?"},
    {"stage": "Send email", "description": "Bob is told", "verificationQuestion": "Send the e-mail to Bob?"},
]


def assert_int_metrics(metrics: dict[str, Any]) -> None:
    assert METRIC_KEYS <= set(metrics), metrics
    for name in METRIC_KEYS:
        assert type(metrics[name]) is int and metrics[name] >= 0, (name, metrics)


async def test_queued_record_without_a_worker(api_only: Service) -> None:
    acct = await account(api_only, "owner@example.com", "eval:manage")
    code, created = await create(
        api_only,
        acct.key,
        {
            "taskName": "Release notes",
            "taskDescription": TWO_STEPS,
            "checkpoints": CHECKPOINTS,
            "assignedReviewer": REVIEWER,
            "webhookUrl": "https://hooks.example.com/vouch",
        },
    )
    assert code == 201, created
    response = await api_only.client.get(status_path(created["executionId"]), headers=bearer(acct.key))
    record = await response.get_json()

    assert response.status_code == 200, record
    assert response.mimetype == "application/json"
    assert set(record) == RECORD_KEYS
    assert record["success"] is True
    assert record["executionId"] == created["executionId"]
    assert record["taskName"] == "Release notes"
    assert record["status"] == "queued"
    assert record["testMode"] == "with-verification"
    assert record["assignedReviewer"] == REVIEWER
    assert record["agentModel"] == "offline"
    assert record["agent"] == {"model": "offline", "kind": "rule-based"}
    assert record["chatUrl"] == created["chatUrl"]
    parse_time(record["createdAt"])
    assert record["startedAt"] is None
    assert record["completedAt"] is None
    assert record["result"] is None
    assert record["error"] is None
    assert record["checkpointCount"] == 2 == len(record["checkpoints"])
    for given, checkpoint in zip(CHECKPOINTS, record["checkpoints"], strict=True):
        assert set(checkpoint) == CHECKPOINT_KEYS
        assert isinstance(checkpoint["checkpointId"], str) and checkpoint["checkpointId"]
        assert checkpoint["stage"] == given["stage"]
        assert checkpoint["description"] == given["description"]
        assert checkpoint["verificationQuestion"] == given["verificationQuestion"]
        assert checkpoint["origin"] == "caller"
        assert checkpoint["status"] == "pending"
        assert checkpoint["awaitingSince"] is None
        assert checkpoint["nextAction"] is None  # the agent has not paused there
        assert checkpoint["decision"] is None
    assert len({cp["checkpointId"] for cp in record["checkpoints"]}) == 2
    assert_int_metrics(record["metrics"])
    assert record["metrics"]["steps"] == 0
    assert record["metrics"]["toolCalls"] == 0
    assert record["metrics"]["reviewWaitMs"] == 0

    # Still queued on a second look: nothing runs it in this app.
    again = await get_status(api_only, acct.key, created["executionId"])
    assert again["status"] == "queued"
    assert again["startedAt"] is None


async def test_without_verification_runs_to_completion(service: Service) -> None:
    acct = await account(service, "owner@example.com", "eval:manage")
    execution_id = await create_ok(
        service,
        acct.key,
        {
            "taskName": "Release notes",
            "taskDescription": TWO_STEPS,
            "checkpoints": CHECKPOINTS,
            "testMode": "without-verification",
        },
    )
    record = await wait_for(service, acct.key, execution_id, has_status("completed"))

    assert set(record) == RECORD_KEYS
    assert record["testMode"] == "without-verification"
    assert record["assignedReviewer"] is None
    assert record["error"] is None
    created, started, completed = (parse_time(record[k]) for k in ("createdAt", "startedAt", "completedAt"))
    assert created <= started <= completed

    summary = record["result"]["summary"]
    assert "2 step(s)" in summary, summary
    assert "plan.md" in summary, summary
    assert "bob@example.com" in summary, summary

    assert len(record["checkpoints"]) == 2
    for checkpoint in record["checkpoints"]:
        assert set(checkpoint) == CHECKPOINT_KEYS
        assert checkpoint["status"] == "auto_approved"
        assert checkpoint["awaitingSince"] is None
        assert checkpoint["nextAction"] is None  # passed without a pause
        decision = checkpoint["decision"]
        assert decision is not None
        assert decision["via"] == "auto"
        assert decision["decision"] == "approve"
        parse_time(decision["at"])

    metrics = record["metrics"]
    assert_int_metrics(metrics)
    assert metrics["steps"] == 2
    assert metrics["toolCalls"] == 2
    assert metrics["reviewWaitMs"] == 0
    assert metrics["durationMs"] >= metrics["agentMs"]

    # The e-mail step really happened, once.
    assert await mail_to(service, execution_id) == ["bob@example.com"]

    # A finished record stays put: the duration no longer grows.
    again = await get_status(service, acct.key, execution_id)
    assert again["metrics"]["durationMs"] == metrics["durationMs"]
    assert again["completedAt"] == record["completedAt"]


async def test_unknown_and_foreign_ids_are_indistinguishable(api_only: Service) -> None:
    alice = await account(api_only, "alice@example.com", "eval:manage")
    mallory = await account(api_only, "mallory@example.com", "eval:manage")
    alice_run = await create_ok(api_only, alice.key, {"taskName": "t", "taskDescription": "Write a note saying hi."})

    foreign = await api_only.client.get(status_path(alice_run), headers=bearer(mallory.key))
    unknown = await api_only.client.get(status_path("exe_doesnotexist0000000000000"), headers=bearer(mallory.key))
    foreign_body, unknown_body = await foreign.get_json(), await unknown.get_json()

    assert_problem(foreign, foreign_body, 404, "not_found", "Not Found")
    assert_problem(unknown, unknown_body, 404, "not_found", "Not Found")
    assert foreign_body == unknown_body
    assert alice_run not in foreign_body["detail"]
    # The owner still sees it.
    assert (await get_status(api_only, alice.key, alice_run))["executionId"] == alice_run
