"""The eval:manage operations on one's own executions: PATCH, cancel, DELETE (the list: test_list_executions.py)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
import sqlalchemy as sa

import agents.worker
from agents.claims import claim_next
from agents.runner import ExecutionRunner
from core.models import Checkpoint, Decision, Event, Execution, MailMessage, ToolCall, WorkspaceFile
from tests.api.helpers import (
    REVIEWER,
    account,
    assert_problem,
    create_ok,
    decide,
    get_status,
    has_status,
    mail_to,
    paused_at,
    status_path,
    task,
    wait_for,
)
from tests.api.rows import insert_execution
from tests.conftest import Account, Service, bearer
from tests.support.waiting import channel_of, until

LIST = "/api/eval/executions"


def item_path(execution_id: str, action: str = "") -> str:
    return f"{LIST}/{execution_id}{'/' + action if action else ''}"


async def patch(service: Service, acct: Account, execution_id: str, body: Any) -> tuple[Any, dict[str, Any]]:
    response = await service.client.patch(item_path(execution_id), json=body, headers=bearer(acct.key))
    return response, await response.get_json()


async def cancel(service: Service, acct: Account, execution_id: str) -> tuple[Any, dict[str, Any]]:
    response = await service.client.post(item_path(execution_id, "cancel"), headers=bearer(acct.key))
    return response, await response.get_json()


async def events_of(service: Service, execution_id: str, type_: str) -> list[dict[str, Any]]:
    async with service.db.reading() as session:
        rows = await session.scalars(
            sa.select(Event.payload).where(Event.execution_id == execution_id, Event.type == type_).order_by(Event.seq)
        )
        return list(rows)


# --- PATCH -----------------------------------------------------------------------------------------------------


async def test_patch_changes_reviewer_and_webhook_with_events(api_only: Service) -> None:
    acct = await account(api_only, "owner@example.com", "eval:manage")
    execution_id = await create_ok(
        api_only,
        acct.key,
        task(
            assignedReviewer=REVIEWER,
            webhookUrl="https://old.example.com/hook?token=s3cret",
            checkpoints=[{"stage": "a", "verificationQuestion": "a?"}],
        ),
    )
    response, record = await patch(
        api_only,
        acct,
        execution_id,
        {"assignedReviewer": " New.Person@Example.com ", "webhookUrl": "https://new.example.com/hook?token=t0ken"},
    )
    assert response.status_code == 200, record
    assert record["assignedReviewer"] == "new.person@example.com"
    assert record["executionId"] == execution_id and record["status"] == "queued"
    updates = await events_of(api_only, execution_id, "execution.updated")
    assert updates == [
        {"field": "assignedReviewer", "from": REVIEWER, "to": "new.person@example.com", "by": acct.email},
        {"field": "webhookUrl", "from": "old.example.com", "to": "new.example.com", "by": acct.email},
    ]
    async with api_only.db.reading() as session:
        assert (
            await session.get_one(Execution, execution_id)
        ).webhook_url == "https://new.example.com/hook?token=t0ken"
    # The same values again change nothing and add no event; null clears the webhook.
    response, record = await patch(api_only, acct, execution_id, {"assignedReviewer": "new.person@example.com"})
    assert response.status_code == 200 and len(await events_of(api_only, execution_id, "execution.updated")) == 2
    response, record = await patch(api_only, acct, execution_id, {"webhookUrl": None})
    assert response.status_code == 200
    async with api_only.db.reading() as session:
        assert (await session.get_one(Execution, execution_id)).webhook_url is None


async def test_patch_validates_like_create(api_only: Service, subtests: pytest.Subtests) -> None:
    acct = await account(api_only, "owner@example.com", "eval:manage")
    reviewed = await create_ok(
        api_only, acct.key, task(assignedReviewer=REVIEWER, checkpoints=[{"stage": "a", "verificationQuestion": "?"}])
    )
    bad = [
        ({"assignedReviewer": "not-an-address"}, "/assignedReviewer"),
        ({"webhookUrl": "ftp://example.com/x"}, "/webhookUrl"),
        ({"webhookUrl": "https://" + "a" * 2050}, "/webhookUrl"),
        ({"webhookUrl": "https://hooks.example.com/a\r\nX-Injected: 1"}, "/webhookUrl"),
        ({"webhookUrl": "https://hooks.example.com/a\x1bb"}, "/webhookUrl"),
        ({"assignedReviewer": None}, "/assignedReviewer"),  # checkpoints need a reviewer
        ({"taskName": "renamed"}, "/taskName"),
        ({}, ""),
    ]
    for body, pointer in bad:
        with subtests.test(msg=str(body)[:40]):
            response, payload = await patch(api_only, acct, reviewed, body)
            assert_problem(response, payload, 422, "validation_failed")
            assert payload["errors"][0]["pointer"] == pointer
    with subtests.test(msg="not JSON"):
        response = await api_only.client.patch(
            item_path(reviewed), data="{", headers={**bearer(acct.key), "Content-Type": "application/json"}
        )
        assert_problem(response, await response.get_json(), 400, "invalid_json")
    with subtests.test(msg="not declared JSON"):
        response = await api_only.client.patch(item_path(reviewed), data="{}", headers=bearer(acct.key))
        assert_problem(response, await response.get_json(), 415, "unsupported_media_type")
    with subtests.test(msg="no checkpoints: the reviewer may be cleared"):
        plain = await create_ok(api_only, acct.key, task(assignedReviewer=REVIEWER))
        response, record = await patch(api_only, acct, plain, {"assignedReviewer": None})
        assert response.status_code == 200 and record["assignedReviewer"] is None
    assert (await get_status(api_only, acct.key, reviewed))["assignedReviewer"] == REVIEWER


async def test_patch_refuses_finished_and_foreign_executions(api_only: Service, subtests: pytest.Subtests) -> None:
    acct = await account(api_only, "owner@example.com", "eval:manage")
    other = await account(api_only, "other@example.com", "eval:manage")
    for status in ("completed", "failed", "rejected", "cancelled"):
        with subtests.test(msg=status):
            execution_id, _ = await insert_execution(api_only.db, acct, status=status)
            response, payload = await patch(api_only, acct, execution_id, {"webhookUrl": "https://x.example.com/"})
            assert_problem(response, payload, 409, "execution_finished")
            assert status in payload["detail"]
    theirs, _ = await insert_execution(api_only.db, other)
    for execution_id in (theirs, "exe_unknown"):
        response, payload = await patch(api_only, acct, execution_id, {"webhookUrl": "https://x.example.com/"})
        assert_problem(response, payload, 404, "not_found")


async def test_new_reviewer_alone_decides_the_awaiting_checkpoint(service: Service) -> None:
    owner = await account(service, "owner@example.com", "eval:manage")
    old = await account(service, REVIEWER, "eval:manage")
    new = await account(service, "new.reviewer@example.com", "eval:manage")
    execution_id = await create_ok(
        service,
        owner.key,
        task(assignedReviewer=old.email, checkpoints=[{"stage": "Note", "verificationQuestion": "Write it?"}]),
    )
    record = await wait_for(service, owner.key, execution_id, paused_at(0))
    checkpoint_id = record["checkpoints"][0]["checkpointId"]
    response, record = await patch(service, owner, execution_id, {"assignedReviewer": new.email})
    assert response.status_code == 200 and record["checkpoints"][0]["status"] == "awaiting_review"

    code, payload = await decide(service, old.key, execution_id, checkpoint_id, {"decision": "approve"})
    assert code == 404, payload  # the old reviewer no longer sees it at all
    code, payload = await decide(service, owner.key, execution_id, checkpoint_id, {"decision": "approve"})
    assert (code, payload["code"]) == (403, "not_assigned_reviewer")
    assert new.email in payload["detail"]
    code, payload = await decide(service, new.key, execution_id, checkpoint_id, {"decision": "approve"})
    assert code == 200, payload
    assert payload["decision"]["by"] == new.email
    await wait_for(service, owner.key, execution_id, has_status("completed"))


# --- cancel ----------------------------------------------------------------------------------------------------


async def test_cancel_queued_execution(api_only: Service) -> None:
    acct = await account(api_only, "owner@example.com", "eval:manage")
    execution_id = await create_ok(api_only, acct.key, task())
    response, record = await cancel(api_only, acct, execution_id)
    assert response.status_code == 200, record
    assert record["status"] == "cancelled" and record["completedAt"] is not None
    assert await events_of(api_only, execution_id, "execution.cancelled") == [{"status": "cancelled", "by": acct.email}]
    assert await claim_next(api_only.db, "test-worker", 30) is None  # no worker will pick it up
    for _ in range(2):  # cancelling again, or anything finished, is a conflict
        response, payload = await cancel(api_only, acct, execution_id)
        assert_problem(response, payload, 409, "execution_finished")
    for status in ("completed", "failed", "rejected"):
        finished, _ = await insert_execution(api_only.db, acct, status=status)
        response, payload = await cancel(api_only, acct, finished)
        assert_problem(response, payload, 409, "execution_finished")


async def test_cancel_leaves_checkpoints_undecidable(api_only: Service) -> None:
    acct = await account(api_only, "owner@example.com", "eval:manage")
    execution_id, (waiting, pending) = await insert_execution(
        api_only.db, acct, reviewer=acct.email, checkpoints=2, awaiting=True
    )
    response, record = await cancel(api_only, acct, execution_id)
    assert response.status_code == 200 and record["status"] == "cancelled"
    for checkpoint_id in (waiting, pending):
        code, payload = await decide(api_only, acct.key, execution_id, checkpoint_id, {"decision": "approve"})
        assert (code, payload["code"]) == (409, "execution_not_awaiting_review"), payload
        assert "cancelled" in payload["detail"]
    async with api_only.db.reading() as session:
        assert await session.scalar(sa.select(sa.func.count()).select_from(Decision)) == 0


async def test_cancel_stops_a_running_worker_mid_step(
    service: Service, monkeypatch: pytest.MonkeyPatch
) -> None:
    finished: dict[str, asyncio.Event] = {}

    class ObservedRunner(ExecutionRunner):
        async def run(self) -> None:
            try:
                await super().run()
            finally:
                finished.setdefault(self.execution_id, asyncio.Event()).set()

    monkeypatch.setattr(agents.worker, "ExecutionRunner", ObservedRunner)
    acct = await account(service, "owner@example.com", "eval:manage")
    execution_id = await create_ok(
        service,
        acct.key,
        task(
            testMode="without-verification",
            taskDescription=(
                'Send an email to first@example.com with subject "one" and body "1". Then wait 120 seconds. '
                'Then send an email to second@example.com with subject "two" and body "2".'
            ),
        ),
    )

    async def waiting() -> bool | None:
        calls = await events_of(service, execution_id, "tool.call")
        return True if any(c["tool"] == "wait" for c in calls) else None

    await until(waiting, bus=service.db.bus, channel=channel_of(execution_id))
    response, record = await cancel(service, acct, execution_id)
    assert response.status_code == 200 and record["status"] == "cancelled", record

    done = finished.setdefault(execution_id, asyncio.Event())
    # Told over the bus, the runner stops inside the 120 s wait: waiting for its next step would take minutes.
    await asyncio.wait_for(done.wait(), 15)
    assert await mail_to(service, execution_id) == ["first@example.com"]
    async with service.db.reading() as session:
        calls = list(await session.scalars(sa.select(ToolCall).where(ToolCall.execution_id == execution_id)))
        execution = await session.get_one(Execution, execution_id)
    assert [(c.tool, c.status) for c in sorted(calls, key=lambda c: c.step_index)] == [
        ("send_email", "succeeded"),
        ("wait", "started"),
    ]
    assert execution.status == "cancelled" and execution.worker_id is None
    assert [e["tool"] for e in await events_of(service, execution_id, "tool.result")] == ["send_email"]


# --- DELETE ----------------------------------------------------------------------------------------------------


async def test_delete_finished_execution_removes_its_rows(service: Service) -> None:
    acct = await account(service, "owner@example.com", "eval:manage")
    execution_id = await create_ok(
        service,
        acct.key,
        task(
            taskDescription='Write a note called n.md saying "hi". Then send an email to c@example.com '
            'with subject "s" and body "b".',
            assignedReviewer=acct.email,
            checkpoints=[{"stage": "Send", "verificationQuestion": "Send?"}],
        ),
    )
    record = await wait_for(service, acct.key, execution_id, paused_at(0))
    code, _ = await decide(
        service, acct.key, execution_id, record["checkpoints"][0]["checkpointId"], {"decision": "approve"}
    )
    assert code == 200
    await wait_for(service, acct.key, execution_id, has_status("completed"))
    tables = (Checkpoint, Decision, Event, ToolCall, WorkspaceFile)
    async with service.db.reading() as session:
        before = [
            await session.scalar(sa.select(sa.func.count()).select_from(t).where(t.execution_id == execution_id))
            for t in tables
        ]
    assert all(before), before

    response = await service.client.delete(item_path(execution_id), headers=bearer(acct.key))
    assert response.status_code == 204 and await response.get_data() == b""
    status = await service.client.get(status_path(execution_id), headers=bearer(acct.key))
    assert_problem(status, await status.get_json(), 404, "not_found")
    async with service.db.reading() as session:
        for table in (Execution, *tables):
            column = Execution.id if table is Execution else table.execution_id
            assert (
                await session.scalar(sa.select(sa.func.count()).select_from(table).where(column == execution_id)) == 0
            ), table
        # Sent mail stays in the outbox as a record of what left the building, detached from the execution.
        # (The agent's one mail; the review mail to the reviewer stays the same way.)
        assert (
            await session.scalar(
                sa.select(sa.func.count()).select_from(MailMessage).where(MailMessage.message_key.like("tool:%"))
            )
            == 1
        )
    again = await service.client.delete(item_path(execution_id), headers=bearer(acct.key))
    assert again.status_code == 404


async def test_delete_refuses_unfinished_and_foreign(api_only: Service, subtests: pytest.Subtests) -> None:
    acct = await account(api_only, "owner@example.com", "eval:manage")
    other = await account(api_only, "other@example.com", "eval:manage")
    for status in ("queued", "running", "awaiting_review"):
        with subtests.test(msg=status):
            execution_id, _ = await insert_execution(api_only.db, acct, status=status)
            response = await api_only.client.delete(item_path(execution_id), headers=bearer(acct.key))
            payload = await response.get_json()
            assert_problem(response, payload, 409, "execution_not_finished")
            assert (await get_status(api_only, acct.key, execution_id))["status"] == status
    theirs, _ = await insert_execution(api_only.db, other, status="completed")
    for execution_id in (theirs, "exe_unknown"):
        response = await api_only.client.delete(item_path(execution_id), headers=bearer(acct.key))
        assert_problem(response, await response.get_json(), 404, "not_found")
    assert (await get_status(api_only, other.key, theirs))["status"] == "completed"
