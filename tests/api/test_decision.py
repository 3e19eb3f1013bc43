"""POST /api/eval/executions/<id>/checkpoints/<cid>/decision: the reviewer's API channel."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
import sqlalchemy as sa

from core.models import Decision, WorkspaceFile
from tests.api.helpers import (
    account,
    assert_problem,
    create_ok,
    decide,
    decision_path,
    get_status,
    has_status,
    mail_to,
    parse_time,
    paused_at,
    task,
    wait_for,
)
from tests.conftest import Account, Service, bearer

NOTE_THEN_MAIL = 'Write a note called plan.md saying "ship it". Then send an email to bob@example.com saying "go".'
TWO_CHECKPOINTS = [
    {"stage": "Draft note", "description": "The plan is written", "verificationQuestion": "Write the note?"},
    {"stage": "Send email", "description": "Bob is told", "verificationQuestion": "Send the e-mail to Bob?"},
]


async def workspace_paths(service: Service, execution_id: str) -> list[str]:
    async with service.db.reading() as session:
        rows = await session.scalars(sa.select(WorkspaceFile.path).where(WorkspaceFile.execution_id == execution_id))
        return sorted(rows)


async def two_checkpoint_run(service: Service, owner: Account, reviewer: str) -> str:
    return await create_ok(
        service,
        owner.key,
        task(taskDescription=NOTE_THEN_MAIL, checkpoints=TWO_CHECKPOINTS, assignedReviewer=reviewer),
    )


async def test_approve_twice_pauses_then_completes(service: Service) -> None:
    owner = await account(service, "owner@example.com", "eval:manage")
    execution_id = await two_checkpoint_run(service, owner, owner.email)

    record = await wait_for(service, owner.key, execution_id, paused_at(0))
    first, second = record["checkpoints"]
    assert second["status"] == "pending"
    parse_time(first["awaitingSince"])
    assert record["completedAt"] is None
    assert record["metrics"]["steps"] == 0
    assert await workspace_paths(service, execution_id) == []

    code, body = await decide(
        service, owner.key, execution_id, first["checkpointId"], {"decision": "approve", "comment": "  looks right "}
    )
    assert code == 200, body
    assert body["success"] is True
    assert body["executionId"] == execution_id
    assert body["checkpointId"] == first["checkpointId"]
    assert body["decision"]["decision"] == "approve"
    assert body["decision"]["by"] == owner.email
    assert body["decision"]["via"] == "api"
    assert body["decision"]["comment"] == "looks right"

    record = await wait_for(service, owner.key, execution_id, paused_at(1))
    assert record["checkpoints"][0]["status"] == "approved"
    assert record["metrics"]["steps"] == 1
    assert await workspace_paths(service, execution_id) == ["plan.md"]
    assert await mail_to(service, execution_id) == []  # the e-mail waits behind the second checkpoint

    code, body = await decide(service, owner.key, execution_id, second["checkpointId"], {"decision": "approve"})
    assert code == 200, body
    assert body["decision"]["comment"] == ""

    record = await wait_for(service, owner.key, execution_id, has_status("completed"))
    assert await mail_to(service, execution_id) == ["bob@example.com"]
    assert record["metrics"]["steps"] == 2
    assert "2 step(s)" in record["result"]["summary"]
    parse_time(record["completedAt"])
    decisions = [cp["decision"] for cp in record["checkpoints"]]
    assert [cp["status"] for cp in record["checkpoints"]] == ["approved", "approved"]
    assert [d["decision"] for d in decisions] == ["approve", "approve"]
    assert [d["via"] for d in decisions] == ["api", "api"]
    assert [d["by"] for d in decisions] == [owner.email, owner.email]
    assert [d["comment"] for d in decisions] == ["looks right", ""]
    waits = [
        parse_time(d["at"]) - parse_time(cp["awaitingSince"])
        for d, cp in zip(decisions, record["checkpoints"], strict=True)
    ]
    assert all(wait.total_seconds() >= 0 for wait in waits)
    # The metrics agree with the timestamps in the record (which are cut to whole milliseconds).
    expected_wait_ms = sum(wait.total_seconds() * 1000 for wait in waits)
    assert abs(record["metrics"]["reviewWaitMs"] - expected_wait_ms) <= 4, record["metrics"]
    total = parse_time(record["completedAt"]) - parse_time(record["createdAt"])
    assert abs(record["metrics"]["durationMs"] - total.total_seconds() * 1000) <= 2, record["metrics"]
    assert record["metrics"]["durationMs"] >= record["metrics"]["reviewWaitMs"]


async def test_reject_with_no_revisions_left_ends_the_execution(service: Service) -> None:
    owner = await account(service, "owner@example.com", "eval:manage")
    execution_id = await create_ok(
        service,
        owner.key,
        task(
            taskDescription="Send an email to bob@example.com saying hi.",
            checkpoints=[{"stage": "Before sending", "verificationQuestion": "Send the e-mail?"}],
            assignedReviewer=owner.email,
            maxRevisions=0,
        ),
    )
    record = await wait_for(service, owner.key, execution_id, paused_at(0))
    checkpoint_id = record["checkpoints"][0]["checkpointId"]

    code, body = await decide(
        service, owner.key, execution_id, checkpoint_id, {"decision": "reject", "comment": "wrong recipient"}
    )
    assert code == 200, body
    assert body["decision"]["decision"] == "reject"

    # A later execution that the worker finishes: had the rejected one been runnable, the
    # worker (which claims oldest first) would have taken it up before this one.
    later = await create_ok(service, owner.key, task(testMode="without-verification"))
    await wait_for(service, owner.key, later, has_status("completed"))

    record = await get_status(service, owner.key, execution_id)
    assert record["status"] == "rejected"
    parse_time(record["completedAt"])
    assert record["result"] is None
    checkpoint = record["checkpoints"][0]
    assert checkpoint["status"] == "rejected"
    assert checkpoint["decision"]["decision"] == "reject"
    assert checkpoint["decision"]["by"] == owner.email
    assert checkpoint["decision"]["via"] == "api"
    assert checkpoint["decision"]["comment"] == "wrong recipient"
    assert record["metrics"]["steps"] == 0
    assert await mail_to(service, execution_id) == []

    # A rejected execution cannot be revived through its checkpoint.
    code, body = await decide(service, owner.key, execution_id, checkpoint_id, {"decision": "approve"})
    assert code == 409
    assert body["code"] == "already_decided"


async def test_second_decision_is_409_naming_the_first(service: Service) -> None:
    owner = await account(service, "owner@example.com", "eval:manage")
    execution_id = await two_checkpoint_run(service, owner, owner.email)
    record = await wait_for(service, owner.key, execution_id, paused_at(0))
    checkpoint_id = record["checkpoints"][0]["checkpointId"]

    code, first = await decide(service, owner.key, execution_id, checkpoint_id, {"decision": "approve"})
    assert code == 200, first
    for verdict in ("approve", "reject"):
        response = await service.client.post(
            decision_path(execution_id, checkpoint_id),
            json={"decision": verdict, "comment": "late"},
            headers=bearer(owner.key),
        )
        body = await response.get_json()
        assert_problem(response, body, 409, "already_decided", "Conflict")
        assert "approved" in body["detail"]
        assert owner.email in body["detail"]
        assert "via api" in body["detail"]
        assert first["decision"]["at"] in body["detail"]

    # The execution carried on from the first decision only.
    record = await wait_for(service, owner.key, execution_id, paused_at(1))
    assert record["checkpoints"][0]["decision"]["at"] == first["decision"]["at"]


async def test_checkpoint_not_reached_yet_is_409(service: Service) -> None:
    owner = await account(service, "owner@example.com", "eval:manage")
    execution_id = await two_checkpoint_run(service, owner, owner.email)
    record = await wait_for(service, owner.key, execution_id, paused_at(0))
    later = record["checkpoints"][1]["checkpointId"]

    response = await service.client.post(
        decision_path(execution_id, later), json={"decision": "approve"}, headers=bearer(owner.key)
    )
    assert_problem(response, await response.get_json(), 409, "checkpoint_not_awaiting_review", "Conflict")
    record = await get_status(service, owner.key, execution_id)
    assert record["status"] == "awaiting_review"
    assert [cp["status"] for cp in record["checkpoints"]] == ["awaiting_review", "pending"]
    assert record["checkpoints"][1]["decision"] is None


async def test_queued_checkpoint_is_not_awaiting_review(api_only: Service) -> None:
    owner = await account(api_only, "owner@example.com", "eval:manage")
    execution_id = await two_checkpoint_run(api_only, owner, owner.email)
    record = await get_status(api_only, owner.key, execution_id)
    code, body = await decide(
        api_only,
        owner.key,
        execution_id,
        record["checkpoints"][0]["checkpointId"],
        {"decision": "reject", "comment": "too early"},
    )
    assert code == 409, body
    assert body["code"] == "checkpoint_not_awaiting_review"
    assert (await get_status(api_only, owner.key, execution_id))["status"] == "queued"


async def test_assigned_reviewer_who_is_not_the_owner_decides(service: Service) -> None:
    owner = await account(service, "owner@example.com", "eval:manage")
    reviewer = await account(service, "Reviewer@Example.com", "eval:manage")
    stranger = await account(service, "stranger@example.com", "eval:manage")
    execution_id = await two_checkpoint_run(service, owner, "REVIEWER@example.com")
    record = await wait_for(service, owner.key, execution_id, paused_at(0))
    checkpoint_id = record["checkpoints"][0]["checkpointId"]

    # The owner is not the reviewer: known to them, but not theirs to decide.
    response = await service.client.post(
        decision_path(execution_id, checkpoint_id), json={"decision": "approve"}, headers=bearer(owner.key)
    )
    body = await response.get_json()
    assert_problem(response, body, 403, "not_assigned_reviewer", "Access Denied")
    assert reviewer.email in body["detail"]

    # A stranger learns nothing, not even that the execution exists.
    response = await service.client.post(
        decision_path(execution_id, checkpoint_id), json={"decision": "approve"}, headers=bearer(stranger.key)
    )
    stranger_body = await response.get_json()
    assert_problem(response, stranger_body, 404, "not_found", "Not Found")
    response = await service.client.post(
        decision_path("exe_doesnotexist0000000000000", checkpoint_id),
        json={"decision": "approve"},
        headers=bearer(stranger.key),
    )
    assert await response.get_json() == stranger_body

    record = await get_status(service, owner.key, execution_id)
    assert record["checkpoints"][0]["status"] == "awaiting_review"
    assert record["checkpoints"][0]["decision"] is None

    code, body = await decide(
        service, reviewer.key, execution_id, checkpoint_id, {"decision": "approve", "comment": "fine by me"}
    )
    assert code == 200, body
    record = await wait_for(service, owner.key, execution_id, paused_at(1))
    decision = record["checkpoints"][0]["decision"]
    assert decision["by"] == reviewer.email == "reviewer@example.com"
    assert decision["via"] == "api"
    assert decision["comment"] == "fine by me"


async def test_who_may_not_decide_learns_nothing_from_their_body(service: Service) -> None:
    """Whoever may not decide is told so before anything about what they sent: a body is judged only for the
    reviewer, whatever way the decision is tried first (a plain approval is tried as one statement before anything
    is read, where the database allows it)."""
    owner = await account(service, "owner@example.com", "eval:manage")
    reviewer = await account(service, "reviewer@example.com", "eval:manage")
    stranger = await account(service, "stranger@example.com", "eval:manage")
    execution_id = await two_checkpoint_run(service, owner, reviewer.email)
    record = await wait_for(service, owner.key, execution_id, paused_at(0))
    path = decision_path(execution_id, record["checkpoints"][0]["checkpointId"])
    bodies: list[dict[str, Any]] = [
        {"decision": "approve", "rating": 9},  # a plain approval, but a grade out of range
        {"decision": "approve", "editedArgs": {"to": 5}},
        {"decision": "reject"},  # no comment
        {"decision": "maybe"},
    ]
    for body in bodies:
        response = await service.client.post(path, json=body, headers=bearer(stranger.key))
        assert_problem(response, await response.get_json(), 404, "not_found")
        response = await service.client.post(path, json=body, headers=bearer(owner.key))
        assert_problem(response, await response.get_json(), 403, "not_assigned_reviewer")
        response = await service.client.post(path, json=body, headers=bearer(reviewer.key))
        assert response.status_code == 422, (body, await response.get_json())

    record = await get_status(service, owner.key, execution_id)
    assert record["checkpoints"][0]["status"] == "awaiting_review"
    assert record["checkpoints"][0]["decision"] is None


INVALID_DECISIONS: list[dict[str, Any]] = [
    {"decision": "approved"},
    {"decision": "APPROVE"},
    {"decision": ""},
    {"decision": None},
    {"decision": True},
    {},
    {"comment": "no verdict"},
    {"decision": "approve", "comment": 5},
    {"decision": "approve", "reason": "typo of comment"},
]


async def test_invalid_decision_bodies_are_422(api_only: Service, subtests: pytest.Subtests) -> None:
    owner = await account(api_only, "owner@example.com", "eval:manage")
    execution_id = await two_checkpoint_run(api_only, owner, owner.email)
    record = await get_status(api_only, owner.key, execution_id)
    checkpoint_id = record["checkpoints"][0]["checkpointId"]
    for body in INVALID_DECISIONS:
        with subtests.test(msg=repr(body)):
            response = await api_only.client.post(
                decision_path(execution_id, checkpoint_id), json=body, headers=bearer(owner.key)
            )
            payload = await response.get_json()
            assert_problem(response, payload, 422, "validation_failed")
            pointers = {e["pointer"] for e in payload["errors"]}
            assert pointers & {"/decision", "/comment", "/reason"}, payload
            assert payload["errors"][0]["pointer"].lstrip("/") in payload["detail"], payload


async def test_decision_body_must_be_json(api_only: Service) -> None:
    owner = await account(api_only, "owner@example.com", "eval:manage")
    execution_id = await two_checkpoint_run(api_only, owner, owner.email)
    checkpoint_id = (await get_status(api_only, owner.key, execution_id))["checkpoints"][0]["checkpointId"]
    path = decision_path(execution_id, checkpoint_id)
    response = await api_only.client.post(path, data=b"decision=approve", headers=bearer(owner.key))
    assert_problem(response, await response.get_json(), 415, "unsupported_media_type")
    response = await api_only.client.post(
        path, data=b"{approve", headers={**bearer(owner.key), "Content-Type": "application/json"}
    )
    assert_problem(response, await response.get_json(), 400, "invalid_json")
    response = await api_only.client.post(path, json=["approve"], headers=bearer(owner.key))
    assert_problem(response, await response.get_json(), 400, "invalid_body")


async def test_unknown_ids_are_404(api_only: Service) -> None:
    owner = await account(api_only, "owner@example.com", "eval:manage")
    execution_id = await two_checkpoint_run(api_only, owner, owner.email)
    other_id = await two_checkpoint_run(api_only, owner, owner.email)
    other_checkpoint = (await get_status(api_only, owner.key, other_id))["checkpoints"][0]["checkpointId"]

    for path, what in [
        (decision_path(execution_id, "chk_doesnotexist0000000000000"), "checkpoint"),
        # A real checkpoint, but of another execution.
        (decision_path(execution_id, other_checkpoint), "checkpoint"),
        (decision_path("exe_doesnotexist0000000000000", other_checkpoint), "execution"),
    ]:
        response = await api_only.client.post(path, json={"decision": "approve"}, headers=bearer(owner.key))
        payload = await response.get_json()
        assert_problem(response, payload, 404, "not_found", "Not Found")
        assert what in payload["detail"], payload


async def test_concurrent_approvals_one_wins(service: Service) -> None:
    owner = await account(service, "owner@example.com", "eval:manage")
    execution_id = await two_checkpoint_run(service, owner, owner.email)
    record = await wait_for(service, owner.key, execution_id, paused_at(0))
    checkpoint_id = record["checkpoints"][0]["checkpointId"]

    async def approve(n: int) -> tuple[int, dict[str, Any]]:
        return await decide(
            service, owner.key, execution_id, checkpoint_id, {"decision": "approve", "comment": f"attempt {n}"}
        )

    results = await asyncio.gather(*(approve(n) for n in range(10)))
    codes = sorted(code for code, _ in results)
    assert codes == [200] + [409] * 9, results
    winner = next(body for code, body in results if code == 200)
    for code, body in results:
        if code == 409:
            assert body["code"] == "already_decided", body
            assert winner["decision"]["at"] in body["detail"]

    async with service.db.reading() as session:
        rows = list(await session.scalars(sa.select(Decision).where(Decision.checkpoint_id == checkpoint_id)))
    assert len(rows) == 1
    assert rows[0].comment == winner["decision"]["comment"]

    # Exactly one wake-up's worth of progress: on to the second checkpoint, one note written.
    record = await wait_for(service, owner.key, execution_id, paused_at(1))
    assert record["checkpoints"][0]["decision"]["comment"] == winner["decision"]["comment"]
    assert record["metrics"]["steps"] == 1
    assert await workspace_paths(service, execution_id) == ["plan.md"]
