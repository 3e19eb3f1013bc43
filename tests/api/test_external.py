"""Bring your own agent (issue 22): an external execution driven over real HTTP, no worker ever claiming it.

Two live servers share the database and Redis, as two processes would: what one decides reaches a long-poll
held by the other.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
import sqlalchemy as sa

from core.bus import InProcessBus
from core.db import Database
from core.models import Event, Execution, MailMessage, WebhookDelivery
from core.settings import Settings
from tests.client.conftest import accounts
from tests.conftest import Account, bearer
from tests.review.mail_support import links_in
from tests.support.live import live_server
from tests.web.browser import _CSRF

REVIEWER = "reviewer@example.com"
OWNER = "agent-owner@example.com"


@dataclass
class Live:
    base: str
    other_base: str
    settings: Settings
    owner: Account
    reviewer: Account

    def http(self, key: str | None = None, base: str | None = None) -> httpx.Client:
        headers = bearer(key or self.owner.key)
        return httpx.Client(base_url=base or self.base, headers=headers, timeout=90)


@pytest.fixture
def live(settings: Settings) -> Iterator[Live]:
    shared = settings.with_changes(base_url=None, redis_url="redis://127.0.0.1:6379/0")
    owner, reviewer = accounts(shared, (OWNER, ("eval:create",)), (REVIEWER, ("eval:manage",)))
    with live_server(shared, run_worker=True) as base, live_server(shared, run_worker=False) as other:
        yield Live(base, other, shared, owner, reviewer)


def external_task(**extra: Any) -> dict[str, Any]:
    return {
        "taskName": "Own agent",
        "taskDescription": "Draft the release mail and send it.",
        "agentModel": "external",
        "assignedReviewer": REVIEWER,
        **extra,
    }


def start(live: Live, **extra: Any) -> str:
    with live.http() as http:
        created = http.post("/api/eval/create-task-agent", json=external_task(**extra))
    assert created.status_code == 201, created.text
    execution_id: str = created.json()["executionId"]
    return execution_id


def execution_row(live: Live, execution_id: str) -> dict[str, Any]:
    async def read() -> dict[str, Any]:
        database = Database(live.settings.database_url, InProcessBus())
        try:
            async with database.reading() as session:
                row = (await session.execute(
                    sa.select(Execution.status, Execution.worker_id, Execution.started_at, Execution.error_info)
                    .where(Execution.id == execution_id)
                )).one()
                events = list(await session.scalars(
                    sa.select(Event).where(Event.execution_id == execution_id).order_by(Event.seq)
                ))
                mails = list(await session.scalars(
                    sa.select(MailMessage).where(MailMessage.execution_id == execution_id)
                ))
                hooks = (await session.execute(
                    sa.select(WebhookDelivery.event_type, WebhookDelivery.payload)
                    .where(WebhookDelivery.execution_id == execution_id)
                )).all()
                return {"webhooks": [(kind, payload["data"]["status"]) for kind, payload in hooks],
                        "status": row[0], "worker": row[1], "started": row[2], "error": row[3],
                        "events": [(e.seq, e.type, e.payload) for e in events],
                        "mail": [m.text_body for m in mails if m.message_key.startswith("review:")]}
        finally:
            await database.dispose()

    return asyncio.run(read())


def path(execution_id: str, action: str) -> str:
    return f"/api/eval/executions/{execution_id}/{action}"


EVENTS = [
    {"key": "m1", "type": "message", "text": "Looking at the release notes"},
    {"key": "t1", "type": "tool_call", "tool": "read_notes", "args": {"version": "2"},
     "result": {"lines": 12}, "durationMs": 35},
    {"key": "u1", "type": "usage", "model": "openai:gpt-4o", "inputTokens": 1000, "outputTokens": 100},
]


def test_events_are_numbered_counted_and_never_twice(live: Live) -> None:
    execution_id = start(live)
    with live.http() as http:
        sent = http.post(path(execution_id, "events"), json={"events": EVENTS})
        assert sent.status_code == 200, sent.text
        first = sent.json()["events"]
        assert [e["duplicate"] for e in first] == [False, False, False]
        again = http.post(path(execution_id, "events"), json={"events": [*EVENTS, {
            "key": "m2", "type": "message", "text": "Done reading"}]})
        assert again.status_code == 200, again.text
        assert [e["duplicate"] for e in again.json()["events"]] == [True, True, True, False]
        assert [e["seq"] for e in again.json()["events"]][:3] == [e["seq"] for e in first]
    row = execution_row(live, execution_id)
    types = [t for _, t, _ in row["events"]]
    assert types == ["execution.created", "execution.started", "agent.message", "tool.call", "tool.result",
                     "model.request", "agent.message"]
    assert row["status"] == "running" and row["worker"] is None  # the worker beside it never claimed it
    with live.http(live.reviewer.key) as http:  # eval:manage of another user: 404, not the owner's record
        assert http.get(f"/api/eval/status/{execution_id}").status_code == 404
    metrics = _metrics(live, execution_id)
    assert metrics["toolCalls"] == 1 and metrics["toolCallsByTool"] == {"read_notes": 1}
    assert metrics["inputTokens"] == 1000 and metrics["outputTokens"] == 100
    assert metrics["costUsd"] == pytest.approx(0.0035)


def _metrics(live: Live, execution_id: str) -> dict[str, Any]:
    # The owner's key has eval:create only; the status record wants eval:read, which eval:create lacks.
    async def read() -> dict[str, Any]:
        from core.metrics import execution_metrics

        database = Database(live.settings.database_url, InProcessBus())
        try:
            async with database.reading() as session:
                execution = await session.get_one(Execution, execution_id)
                return await execution_metrics(session, execution)
        finally:
            await database.dispose()

    return asyncio.run(read())


def checkpoint_body(key: str = "send-1") -> dict[str, Any]:
    return {
        "key": key,
        "stage": "Send",
        "description": "Mail the team",
        "verificationQuestion": "Send the release mail?",
        "nextAction": {"tool": "send_mail", "args": {"to": "team@example.com", "subject": "v2"}},
    }


def test_a_checkpoint_pauses_mails_the_reviewer_and_a_mail_link_decision_reaches_the_long_poll(live: Live) -> None:
    execution_id = start(live, webhookUrl="https://hooks.example.com/vouch")
    with live.http() as http:
        asked = http.post(path(execution_id, "checkpoints"), json=checkpoint_body())
        assert asked.status_code == 201, asked.text
        checkpoint_id = asked.json()["checkpointId"]
        assert asked.json()["status"] == "awaiting_review"
        row = execution_row(live, execution_id)
        assert row["status"] == "awaiting_review"
        assert any(t == "checkpoint.awaiting_review" for _, t, _ in row["events"])
        (mail,) = row["mail"]
        links = links_in(mail)

        answers: list[httpx.Response] = []
        began = time.monotonic()

        def poll() -> None:
            # Held by the other server: the decision made through the first must reach it over Redis.
            with live.http(base=live.other_base) as other:
                answers.append(other.get(path(execution_id, f"checkpoints/{checkpoint_id}"), params={"wait": 30}))

        poller = threading.Thread(target=poll)
        poller.start()
        with httpx.Client(base_url=live.base, timeout=30) as browser:
            page = browser.get(links["approve"])
            token = _CSRF.search(page.text)
            assert token is not None, page.text[:500]
            # The presession cookie is Secure (`__Host-`): sent back by hand over this plain-HTTP test server.
            cookies = "; ".join(c.split(";", 1)[0] for c in page.headers.get_list("set-cookie"))
            decided = browser.post(links["approve"], data={"csrf_token": token.group(1), "comment": "ship it"},
                                   headers={"Cookie": cookies})
            assert decided.status_code == 200, decided.text[:500]
        poller.join(timeout=40)
        assert answers, "the long-poll answered"
        answer = answers[0].json()
        assert answers[0].status_code == 200, answer
        assert time.monotonic() - began < 25  # woken by the decision, not by the end of its wait
        assert answer["decision"] == "approve" and answer["via"] == "email" and answer["by"] == REVIEWER
        assert answer["args"] == {"to": "team@example.com", "subject": "v2"}
        assert execution_row(live, execution_id)["status"] == "running"

        # The agent restarts and asks again with the same key: the same checkpoint, its decision, no second pause.
        again = http.post(path(execution_id, "checkpoints"), json=checkpoint_body())
        assert again.status_code == 200, again.text
        assert again.json()["checkpointId"] == checkpoint_id and again.json()["decision"] == "approve"
        pauses = [t for _, t, _ in execution_row(live, execution_id)["events"] if t == "checkpoint.awaiting_review"]
        assert len(pauses) == 1

        done = http.post(path(execution_id, "complete"), json={"status": "completed", "result": {"output": "sent"}})
        assert done.status_code == 200, done.text
        late = http.post(path(execution_id, "events"), json={"events": [{"key": "x", "type": "message", "text": "hi"}]})
        assert late.status_code == 409 and late.json()["code"] == "execution_finished"
    row = execution_row(live, execution_id)
    assert row["status"] == "completed" and row["events"][-1][1] == "execution.completed"
    # The completion webhook is queued with the final state, as for a built-in run (core/webhooks.py).
    assert row["webhooks"] == [("execution.completed", "completed")]


def test_an_api_decision_with_edits_and_a_pending_answer(live: Live) -> None:
    execution_id = start(live)
    with live.http() as http:
        checkpoint_id = http.post(path(execution_id, "checkpoints"), json=checkpoint_body()).json()["checkpointId"]
        pending = http.get(path(execution_id, f"checkpoints/{checkpoint_id}"), params={"wait": 0.2})
        assert pending.status_code == 200 and pending.json()["decision"] is None
        assert http.get(path(execution_id, f"checkpoints/{checkpoint_id}"), params={"wait": 61}).status_code == 422
        with live.http(live.reviewer.key, base=live.other_base) as reviewer:
            decided = reviewer.post(path(execution_id, f"checkpoints/{checkpoint_id}/decision"),
                                    json={"decision": "approve", "editedArgs": {"subject": "v2.0"}})
            assert decided.status_code == 200, decided.text
        answer = http.get(path(execution_id, f"checkpoints/{checkpoint_id}"), params={"wait": 5}).json()
        assert answer["decision"] == "approve" and answer["editedArgs"] == {"subject": "v2.0"}
        assert answer["args"] == {"to": "team@example.com", "subject": "v2.0"}


def test_a_caller_checkpoint_is_answered_by_its_stage(live: Live) -> None:
    execution_id = start(live, checkpoints=[
        {"stage": "Send", "description": "Mail to the team", "verificationQuestion": "Send it?"}])
    with live.http() as http:
        asked = http.post(path(execution_id, "checkpoints"), json=checkpoint_body())
        assert asked.status_code == 201, asked.text
    row = execution_row(live, execution_id)
    (pause,) = [p for _, t, p in row["events"] if t == "checkpoint.awaiting_review"]
    assert pause["checkpointId"] == asked.json()["checkpointId"] and pause["origin"] == "caller"
    assert pause["position"] == 0


def test_cancel_reaches_the_agent(live: Live) -> None:
    execution_id = start(live)
    with live.http() as http:
        checkpoint_id = http.post(path(execution_id, "checkpoints"), json=checkpoint_body()).json()["checkpointId"]
        answers: list[httpx.Response] = []
        poller = threading.Thread(target=lambda: answers.append(
            http.get(path(execution_id, f"checkpoints/{checkpoint_id}"), params={"wait": 30})))
        began = time.monotonic()
        poller.start()
        with live.http(_owner_manage_key(live)) as owner:
            assert owner.post(path(execution_id, "cancel")).status_code == 200
        poller.join(timeout=40)
        assert answers and answers[0].status_code == 409 and answers[0].json()["code"] == "execution_cancelled"
        assert time.monotonic() - began < 25
        sent = http.post(path(execution_id, "events"), json={"events": [{"key": "a", "type": "message", "text": "x"}]})
        assert sent.status_code == 409 and sent.json()["code"] == "execution_cancelled"


def _owner_manage_key(live: Live) -> str:
    async def add() -> str:
        from core.accounts import create_api_key, user_by_email

        database = Database(live.settings.database_url, InProcessBus())
        try:
            async with database.transaction() as session:
                user = await user_by_email(session, OWNER)
                assert user is not None
                new = await create_api_key(session, user, name="manage", scopes=["eval:manage"],
                                           secret_key=live.settings.secret_key)
                return new.secret
        finally:
            await database.dispose()

    return asyncio.run(add())


def test_refusals_another_user_a_built_in_run_and_a_failed_end(live: Live) -> None:
    execution_id = start(live)
    with live.http(live.reviewer.key) as stranger:
        for action in ("events", "checkpoints", "complete"):
            refused = stranger.post(path(execution_id, action), json={})
            assert refused.status_code == 404, refused.text
        assert stranger.get(path(execution_id, "checkpoints/chk_x")).status_code == 404
    with live.http() as http:
        built_in = http.post("/api/eval/create-task-agent", json={**external_task(), "agentModel": "offline"})
        assert built_in.status_code == 201
        refused = http.post(path(built_in.json()["executionId"], "events"), json={"events": EVENTS})
        assert refused.status_code == 409 and refused.json()["code"] == "not_external"
        big = http.post(path(execution_id, "events"), content=b"x" * (1024 * 1024 + 1),
                        headers={"Content-Type": "application/json"})
        assert big.status_code == 413
        failed = http.post(path(execution_id, "complete"), json={"status": "failed", "error": "no network"})
        assert failed.status_code == 200, failed.text
    row = execution_row(live, execution_id)
    assert row["status"] == "failed" and row["error"]["code"] == "agent_failed"


async def test_no_worker_claims_an_external_execution(db: Database, settings: Settings) -> None:
    from agents.claims import claim_execution, claim_next
    from tests.api.rows import insert_execution
    from tests.conftest import make_account

    owner = await make_account(db, settings, "claims@example.com")
    external, _ = await insert_execution(db, owner, agent_model="external")
    assert await claim_next(db, "w1", 30) is None
    assert await claim_execution(db, "w1", 30, external) is None
    built_in, _ = await insert_execution(db, owner)
    claimed = await claim_next(db, "w1", 30)
    assert claimed is not None and claimed.execution_id == built_in


def test_a_silent_external_agent_is_lost_but_not_while_its_checkpoint_waits(settings: Settings) -> None:
    quick = settings.with_changes(base_url=None, external_idle_seconds=1.0)
    (owner,) = accounts(quick, (OWNER, ("eval:create",)))
    with live_server(quick, run_worker=True) as base:
        live = Live(base, base, quick, owner, owner)
        silent, waiting = start(live), start(live)
        with live.http() as http:
            assert http.post(path(waiting, "checkpoints"), json=checkpoint_body()).status_code == 201
        deadline = time.monotonic() + 15
        while execution_row(live, silent)["status"] != "failed":
            assert time.monotonic() < deadline, "the silent agent was never declared lost"
            time.sleep(0.1)  # polling the database with a deadline: the sweep runs in the server's thread
        assert execution_row(live, silent)["error"]["code"] == "agent_lost"
        assert execution_row(live, waiting)["status"] == "awaiting_review"
        with live.http() as http:
            late = http.post(path(silent, "events"), json={"events": [{"key": "a", "type": "message", "text": "x"}]})
            assert late.status_code == 409 and late.json()["code"] == "execution_finished"


def test_the_chat_shows_the_external_agent_s_events_and_its_checkpoint(live: Live) -> None:
    with live.http() as http:
        created = http.post("/api/eval/create-task-agent", json=external_task()).json()
        execution_id = created["executionId"]
        assert http.post(path(execution_id, "events"), json={"events": EVENTS}).status_code == 200
        assert http.post(path(execution_id, "checkpoints"), json=checkpoint_body()).status_code == 201
    with httpx.Client(timeout=30) as browser:
        page = browser.get(created["chatUrl"])
    assert page.status_code == 200, page.text[:500]
    for shown in ("Looking at the release notes", "read_notes", "Send the release mail?", "team@example.com"):
        assert shown in page.text, shown


async def test_complete_sends_the_signed_completion_webhook_to_a_real_receiver(settings: Settings) -> None:
    from core.allowlist import parse_allowlist
    from core.webhook_secrets import signing_secrets
    from tests.support.waiting import until
    from tests.support.webhook_receiver import webhook_receiver

    hooked = settings.with_changes(base_url=None, webhook_allowlist=parse_allowlist("127.0.0.1/32"))
    (owner,) = await asyncio.to_thread(accounts, hooked, (OWNER, ("eval:create",)))
    database = Database(hooked.database_url, InProcessBus())
    try:
        async with database.reading() as session:  # what `vouch webhooks secret` shows the owner
            secret = (await signing_secrets(session, hooked.secret_key, owner.user_id)).current
    finally:
        await database.dispose()
    async with webhook_receiver([secret]) as receiver:
        with live_server(hooked, run_worker=True) as base:
            async with httpx.AsyncClient(base_url=base, headers=bearer(owner.key), timeout=30) as http:
                created = await http.post("/api/eval/create-task-agent", json=external_task(
                    testMode="without-verification", webhookUrl=receiver.url))
                assert created.status_code == 201, created.text
                execution_id = created.json()["executionId"]
                sent = await http.post(path(execution_id, "events"), json={"events": EVENTS})
                assert sent.status_code == 200, sent.text
                done = await http.post(path(execution_id, "complete"), json={
                    "status": "completed", "result": {"output": "Mail sent to the team."}})
                assert done.status_code == 200, done.text
                [request] = await until(lambda: receiver.count(1), timeout=30)
    assert request.verified_with == [0]  # signed with the owner's secret, checked by standardwebhooks
    (body,) = receiver.payloads()
    assert body["type"] == "execution.completed"
    data = body["data"]
    assert data["executionId"] == execution_id and data["status"] == "completed"
    assert data["summary"] == "Mail sent to the team." and data["error"] is None  # the agent's answer
    assert data["metrics"]["toolCalls"] == 1 and data["metrics"]["inputTokens"] == 1000
