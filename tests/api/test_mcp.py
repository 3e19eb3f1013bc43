# ruff: noqa: F811  (the tests take the imported fixture `live` as their argument)
"""Bring your own agent over MCP (issue 22): the official SDK's own client (`mcp.client.streamable_http`) against
Vouch's `/mcp` over real HTTP, on two live servers sharing the database and Redis.

The agent's calls go to one server and the reviewer decides through the other (the API, a mail link), so a
decision reaches the waiting `request_approval` across processes as it would in production.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import httpx2
import pytest
from mcp.client.session import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from mcp_types import CallToolResult, TextContent

from tests.api.test_external import (
    REVIEWER,
    Live,
    _owner_manage_key,
    checkpoint_body,
    execution_row,
    live,  # noqa: F401 (the fixture: two live servers sharing the database and Redis)
    path,
    start,
)
from tests.client.conftest import accounts
from tests.review.mail_support import links_in
from tests.support.live import HTTP_TIMEOUT
from tests.web.browser import _CSRF

SEND = {"tool": "send_mail", "args": {"to": "team@example.com", "subject": "v2"}}


@asynccontextmanager
async def mcp_session(base: str, key: str | None, statuses: list[int] | None = None) -> AsyncIterator[ClientSession]:
    headers = {"Authorization": f"Bearer {key}"} if key is not None else {}

    async def seen(response: httpx2.Response) -> None:
        if statuses is not None:
            statuses.append(response.status_code)

    async with (
        httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(30, read=120),
                           event_hooks={"response": [seen]}) as http,
        streamable_http_client(f"{base}/mcp", http_client=http) as (read, write),
        ClientSession(read, write) as session,
    ):
        await session.initialize()
        yield session


def structured(result: CallToolResult) -> dict[str, Any]:
    assert not result.is_error, result.content
    assert result.structured_content is not None, result.content
    return result.structured_content


def error_text(result: CallToolResult) -> str:
    assert result.is_error, result.structured_content
    (content,) = result.content
    assert isinstance(content, TextContent)
    return content.text


async def until_awaiting(live: Live, execution_id: str, timeout: float = 20) -> dict[str, Any]:
    """The execution's row once a checkpoint waits for its reviewer (the tool call is then held)."""
    deadline = time.monotonic() + timeout
    while True:
        row = await asyncio.to_thread(execution_row, live, execution_id)
        if row["status"] == "awaiting_review":
            return row
        assert time.monotonic() < deadline, f"no checkpoint waited within {timeout} s: {row['status']}"
        await asyncio.sleep(0.05)  # polling the database with a deadline: the pause is made by the server


def awaiting_checkpoint(row: dict[str, Any]) -> str:
    (pause,) = [payload for _, kind, payload in row["events"] if kind == "checkpoint.awaiting_review"]
    checkpoint_id: str = pause["checkpointId"]
    return checkpoint_id


def test_a_tool_call_waits_for_an_api_decision_made_through_another_server(live: Live) -> None:
    execution_id = start(live)

    async def agent() -> None:
        async with mcp_session(live.other_base, live.owner.key) as mcp:
            tools = {tool.name for tool in (await mcp.list_tools()).tools}
            assert {"request_approval", "report_progress", "complete_run"} <= tools
            said = structured(await mcp.call_tool("report_progress", {
                "executionId": execution_id, "message": "Drafting the **release mail**", "key": "p1"}))
            again = structured(await mcp.call_tool("report_progress", {
                "executionId": execution_id, "message": "Drafting the **release mail**", "key": "p1"}))
            assert again == {**said, "duplicate": True} and said["duplicate"] is False
            asked = asyncio.create_task(mcp.call_tool("request_approval", {
                "executionId": execution_id, "stage": "Send", "question": "Send the release mail?",
                "description": "Mail the team", "action": SEND}))
            row = await until_awaiting(live, execution_id)
            assert not asked.done()  # held while the reviewer has not decided
            checkpoint_id = awaiting_checkpoint(row)
            (mail,) = row["mail"]
            assert "Send the release mail?" in mail
            began = time.monotonic()
            async with httpx.AsyncClient(base_url=live.base, timeout=30,
                                         headers={"Authorization": f"Bearer {live.reviewer.key}"}) as reviewer:
                decided = await reviewer.post(path(execution_id, f"checkpoints/{checkpoint_id}/decision"), json={
                    "decision": "approve", "comment": "fine", "editedArgs": {"subject": "v2 is out"}})
                assert decided.status_code == 200, decided.text
            answer = structured(await asyncio.wait_for(asked, 20))
            assert time.monotonic() - began < 10  # woken by the decision, not by a periodic look
            assert answer["decision"] == "approve" and answer["approved"] is True
            assert answer["checkpointId"] == checkpoint_id and answer["via"] == "api" and answer["by"] == REVIEWER
            assert answer["comment"] == "fine" and answer["editedArgs"] == {"subject": "v2 is out"}
            assert answer["args"] == {"to": "team@example.com", "subject": "v2 is out"}
            ended = structured(await mcp.call_tool("complete_run", {
                "executionId": execution_id, "output": "Mail sent."}))
            assert ended["status"] == "completed"
            late = await mcp.call_tool("report_progress", {"executionId": execution_id, "message": "more"})
            assert error_text(late).endswith("execution_finished: execution " + execution_id + " is completed")

    asyncio.run(agent())
    row = execution_row(live, execution_id)
    messages = [payload["text"] for _, kind, payload in row["events"] if kind == "agent.message"]
    assert messages == ["Drafting the **release mail**", "Mail sent."]
    assert row["status"] == "completed"


def test_a_call_cut_off_by_the_client_is_made_again_and_gets_the_mail_decision(live: Live) -> None:
    execution_id = start(live)
    arguments = {"executionId": execution_id, "stage": "Send", "question": "Send it?", "action": SEND}

    async def agent() -> dict[str, Any]:
        async with mcp_session(live.base, live.owner.key) as mcp:
            with pytest.raises(Exception) as cut_off:  # the client gives up; the checkpoint stays
                await mcp.call_tool("request_approval", arguments, read_timeout_seconds=1.0)
            assert "timed out" in str(cut_off.value).lower() or isinstance(cut_off.value, TimeoutError)
        row = await until_awaiting(live, execution_id)
        links = links_in(row["mail"][0])
        # The agent reconnects (a new HTTP client, the other server) and asks the same thing again.
        async with mcp_session(live.other_base, live.owner.key) as mcp:
            asked = asyncio.create_task(mcp.call_tool("request_approval", arguments))
            await _decide_by_mail_link(live, links["reject"], "not today")
            return structured(await asyncio.wait_for(asked, 20))

    answer = asyncio.run(agent())
    assert answer["decision"] == "reject" and answer["approved"] is False
    assert answer["comment"] == "not today" and answer["via"] == "email"
    pauses = [p for _, kind, p in execution_row(live, execution_id)["events"] if kind == "checkpoint.awaiting_review"]
    assert len(pauses) == 1 and pauses[0]["checkpointId"] == answer["checkpointId"]


async def _decide_by_mail_link(live: Live, link: str, comment: str) -> None:
    async with httpx.AsyncClient(base_url=live.base, timeout=30) as browser:
        page = await browser.get(link)
        token = _CSRF.search(page.text)
        assert token is not None, page.text[:500]
        # The presession cookie is Secure (`__Host-`): sent back by hand over this plain-HTTP test server.
        cookies = "; ".join(c.split(";", 1)[0] for c in page.headers.get_list("set-cookie"))
        decided = await browser.post(link, data={"csrf_token": token.group(1), "comment": comment},
                                     headers={"Cookie": cookies})
        assert decided.status_code == 200, decided.text[:500]


def test_the_rest_checkpoint_s_key_names_the_same_checkpoint_over_mcp(live: Live) -> None:
    execution_id = start(live)
    with httpx.Client(
        timeout=HTTP_TIMEOUT, base_url=live.base, headers={"Authorization": f"Bearer {live.owner.key}"}
    ) as http:
        asked = http.post(path(execution_id, "checkpoints"), json=checkpoint_body("send-1"))
        assert asked.status_code == 201, asked.text
        with httpx.Client(
            timeout=HTTP_TIMEOUT, base_url=live.base, headers={"Authorization": f"Bearer {live.reviewer.key}"}
        ) as reviewer:
            decided = reviewer.post(path(execution_id, f"checkpoints/{asked.json()['checkpointId']}/decision"),
                                    json={"decision": "approve"})
            assert decided.status_code == 200, decided.text

    async def agent() -> dict[str, Any]:
        async with mcp_session(live.base, live.owner.key) as mcp:
            return structured(await mcp.call_tool("request_approval", {
                "executionId": execution_id, "stage": "Send", "question": "Send the release mail?",
                "action": SEND, "key": "send-1"}))

    answer = asyncio.run(agent())
    assert answer["checkpointId"] == asked.json()["checkpointId"] and answer["decision"] == "approve"


def test_cancel_ends_the_waiting_call(live: Live) -> None:
    execution_id = start(live)

    async def agent() -> str:
        async with mcp_session(live.base, live.owner.key) as mcp:
            asked = asyncio.create_task(mcp.call_tool("request_approval", {
                "executionId": execution_id, "stage": "Send", "question": "Send it?", "action": SEND}))
            await until_awaiting(live, execution_id)
            manage_key = await asyncio.to_thread(_owner_manage_key, live)
            async with httpx.AsyncClient(base_url=live.other_base, timeout=30,
                                         headers={"Authorization": f"Bearer {manage_key}"}) as owner:
                assert (await owner.post(path(execution_id, "cancel"))).status_code == 200
            return error_text(await asyncio.wait_for(asked, 20))

    assert "execution_cancelled: execution" in asyncio.run(agent())


def test_keys_scopes_and_another_user_s_execution(live: Live) -> None:
    execution_id = start(live)
    (reader,) = accounts(live.settings, ("reader@example.com", ("eval:read",)))
    for key, status, code in ((None, 401, "missing_api_key"), ("svc_eval_not-a-key", 401, "invalid_api_key"),
                              (reader.key, 403, "insufficient_scope")):
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        with httpx.Client(timeout=HTTP_TIMEOUT, base_url=live.base, headers=headers) as http:
            refused = http.post("/mcp", json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
                                headers={"Accept": "application/json, text/event-stream"})
        assert refused.status_code == status and refused.json()["code"] == code, refused.text

    async def with_the_sdk(key: str | None) -> list[int]:
        statuses: list[int] = []
        with pytest.raises(BaseExceptionGroup) as refused:
            async with mcp_session(live.base, key, statuses) as mcp:
                await mcp.list_tools()
        assert refused.group_contains(MCPError)
        return statuses

    for key in (None, "svc_eval_not-a-key"):
        assert asyncio.run(with_the_sdk(key)) == [401]

    async def stranger() -> tuple[str, str]:
        async with mcp_session(live.base, live.reviewer.key) as mcp:  # eval:manage, but another user
            asked = await mcp.call_tool("request_approval", {
                "executionId": execution_id, "stage": "Send", "question": "Send it?", "action": SEND})
            said = await mcp.call_tool("report_progress", {"executionId": execution_id, "message": "hi"})
            return error_text(asked), error_text(said)

    for text in asyncio.run(stranger()):
        assert "not_found: no execution with that id" in text, text
    row = execution_row(live, execution_id)
    assert row["status"] == "queued" and [kind for _, kind, _ in row["events"]] == ["execution.created"]


def test_an_mcp_only_agent_starts_its_run_and_its_reviewer_watches_the_chat(live: Live) -> None:
    async def agent() -> tuple[str, str, dict[str, Any]]:
        async with mcp_session(live.base, live.owner.key) as mcp:
            refused = await mcp.call_tool("start_run", {
                "taskName": "Own agent", "taskDescription": "Send the mail", "testMode": "sometimes"})
            assert "validation_failed" in error_text(refused) and "/testMode" in error_text(refused)
            started = structured(await mcp.call_tool("start_run", {
                "taskName": "Own agent", "taskDescription": "Send the mail", "assignedReviewer": REVIEWER}))
            execution_id, chat = started["executionId"], started["chatUrl"]
            structured(await mcp.call_tool("report_progress", {
                "executionId": execution_id, "message": "Found 3 recipients"}))
            asked = asyncio.create_task(mcp.call_tool("request_approval", {
                "executionId": execution_id, "stage": "Send", "question": "Mail these 3?", "action": SEND}))
            checkpoint_id = awaiting_checkpoint(await until_awaiting(live, execution_id))
            async with httpx.AsyncClient(timeout=30) as browser:
                page = await browser.get(chat)  # the reviewer's view of the run, from the link the agent got
            assert page.status_code == 200 and "Found 3 recipients" in page.text and "Mail these 3?" in page.text
            async with httpx.AsyncClient(base_url=live.other_base, timeout=30,
                                         headers={"Authorization": f"Bearer {live.reviewer.key}"}) as reviewer:
                decided = await reviewer.post(path(execution_id, f"checkpoints/{checkpoint_id}/decision"),
                                              json={"decision": "approve"})
                assert decided.status_code == 200, decided.text
            answer = structured(await asyncio.wait_for(asked, 20))
            ended = structured(await mcp.call_tool("complete_run", {
                "executionId": execution_id, "failed": True, "error": "the mail server refused"}))
            assert ended == {"executionId": execution_id, "status": "failed"}
            return execution_id, checkpoint_id, answer

    execution_id, checkpoint_id, answer = asyncio.run(agent())
    assert answer["checkpointId"] == checkpoint_id and answer["decision"] == "approve"
    row = execution_row(live, execution_id)
    assert row["status"] == "failed" and row["error"]["code"] == "agent_failed"
    assert "the mail server refused" in row["error"]["detail"]
