"""The chat page as the server renders it: access, the history, escaping and security headers."""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from quart import Quart
from werkzeug.datastructures import Headers

from api.app import create_app
from core.db import Database
from core.events import append_any_event
from core.links import chat_view_token
from core.models import Execution, utcnow
from core.settings import Settings
from core.vocabulary import FINAL, Channel, EventType
from review import decide
from tests.chat.helpers import REVIEWER, new_execution, pause_at_first_checkpoint, sign_in

XSS_NAME = "<img src=x onerror=alert(1)>"
XSS_TEXT = '<script>alert("agent")</script>'


@pytest.fixture
async def app(settings: Settings) -> AsyncIterator[Quart]:
    made = create_app(settings, run_worker=False)
    async with made.test_app():
        yield made


def database(app: Quart) -> Database:
    found: Database = app.extensions["vouch"].db
    return found


async def get(app: Quart, path: str, cookie: str | None = None) -> tuple[int, str, Headers]:
    response = await app.test_client().get(path, headers={"Cookie": cookie} if cookie else {})
    return response.status_code, await response.get_data(as_text=True), response.headers


def chat_path(settings: Settings, execution_id: str, token: str | None = "valid") -> str:
    if token == "valid":
        token = chat_view_token(settings.secret_key, execution_id)
    return f"/chat/{execution_id}" + (f"?token={token}" if token is not None else "")


def data_attr(page: str, name: str) -> str:
    found = re.search(rf'id="chat"[^>]*?\sdata-{name}="([^"]*)"', page, re.S)
    assert found, f"no data-{name}"
    return found.group(1)


async def test_task_and_agent_text_render_as_text_under_a_strict_csp(app: Quart, settings: Settings) -> None:
    db = database(app)
    execution_id = await new_execution(db, settings, name=XSS_NAME, description=f"Do this {XSS_TEXT}")
    async with db.transaction() as session:
        await append_any_event(session, execution_id, "agent.message", {"text": XSS_TEXT})
        await append_any_event(
            session,
            execution_id,
            "tool.call",
            {"toolCallId": "call_1", "tool": "write_file", "args": {"path": XSS_NAME}, "actsOnWorld": False},
        )
    status, page, headers = await get(app, chat_path(settings, execution_id))
    assert status == 200
    assert XSS_NAME not in page and XSS_TEXT not in page
    assert "&lt;img src=x onerror=alert(1)&gt;" in page
    assert "&lt;script&gt;alert(&#34;agent&#34;)&lt;/script&gt;" in page
    # Every script is a file of our own; the policy allows no other. JSON data blocks are never executed.
    assert re.findall(r"<script(?![^>]*\s(?:src=|type=\"application/json\"))", page) == []
    csp = headers["Content-Security-Policy"]
    assert "script-src 'self'" in csp and "unsafe-inline" not in csp and "frame-ancestors 'none'" in csp
    # The address holds the view token: it must not travel on in a Referer.
    assert headers["Referrer-Policy"] == "no-referrer"
    assert headers["Cache-Control"] == "no-store"


async def test_without_token_or_sign_in_the_page_is_not_found(app: Quart, settings: Settings) -> None:
    db = database(app)
    owner = "owner@example.com"
    execution_id = await new_execution(db, settings, owner=owner)
    other_id = await new_execution(db, settings)
    for path in (
        chat_path(settings, execution_id, token=None),
        chat_path(settings, execution_id, token="nope"),
        f"/chat/{execution_id}?token={chat_view_token(settings.secret_key, other_id)}",
        chat_path(settings, "exe_unknown"),
    ):
        status, page, _ = await get(app, path)
        assert status == 404, path
        assert "This chat is not available" in page
    stranger, _ = await sign_in(db, settings.secret_key, "stranger@example.com")
    assert (await get(app, chat_path(settings, execution_id, token=None), stranger))[0] == 404
    owner_cookie, _ = await sign_in(db, settings.secret_key, owner)
    status, page, _ = await get(app, chat_path(settings, execution_id, token=None), owner_cookie)
    assert status == 200
    assert data_attr(page, "can-decide") == "false" and data_attr(page, "token") == ""


async def test_only_the_signed_in_reviewer_gets_the_buttons(app: Quart, settings: Settings) -> None:
    db = database(app)
    execution_id = await new_execution(db, settings)
    await pause_at_first_checkpoint(db, execution_id)
    status, page, _ = await get(app, chat_path(settings, execution_id))
    assert status == 200
    assert data_attr(page, "can-decide") == "false" and data_attr(page, "csrf") == ""
    assert "You are the reviewer" not in page
    cookie, csrf = await sign_in(db, settings.secret_key, REVIEWER)
    status, page, _ = await get(app, chat_path(settings, execution_id, token=None), cookie)
    assert status == 200
    assert data_attr(page, "can-decide") == "true" and data_attr(page, "csrf") == csrf
    assert "You are the reviewer" in page


async def test_the_whole_history_is_rendered_on_the_server(app: Quart, settings: Settings) -> None:
    db = database(app)
    execution_id = await new_execution(db, settings)
    async with db.transaction() as session:
        await append_any_event(session, execution_id, "execution.started", {"worker": "w1"})
        await append_any_event(session, execution_id, "agent.message", {"text": "Plan:\n1. write"})
        call = {"toolCallId": "call_1", "tool": "write_file", "args": {"path": "a.md"}, "actsOnWorld": False}
        await append_any_event(session, execution_id, "tool.call", call)
        result = {"toolCallId": "call_1", "tool": "write_file", "result": {"bytes": 2}, "durationMs": 12.5}
        await append_any_event(session, execution_id, "tool.result", result)
    checkpoint_id = await pause_at_first_checkpoint(db, execution_id)
    async with db.transaction() as session:
        await decide(session, checkpoint_id, "approve", by=REVIEWER, via=Channel.CHAT, comment="fine by me")
    async with db.transaction() as session:
        await append_any_event(session, execution_id, "execution.resumed", {"worker": "w2"})
        done = {"status": "completed", "result": {"summary": "ok", "steps": ["wrote a.md"], "unrecognised": []}}
        await append_any_event(session, execution_id, "execution.completed", done)
        row = await session.get_one(Execution, execution_id)
        row.status, row.completed_at = "completed", utcnow()

    status, page, _ = await get(app, chat_path(settings, execution_id))
    assert status == 200
    feed = page.split('id="feed"', 1)[1].split('id="feed-empty"', 1)[0]
    items = re.findall(r'<li class="item ([a-z-]+)[^"]*" data-seq="(\d+)"', feed)
    assert items == [
        ("system", "1"),  # created
        ("system", "2"),  # started
        ("message", "3"),
        ("tool", "4"),  # and its result (5) folded in
        ("card-item", "6"),
        ("reply", "7"),
        ("system", "8"),  # resumed
        ("outcome", "9"),
    ]
    assert "done in 13 ms" in feed and "&#34;bytes&#34;: 2" in feed
    assert 'data-decided="true"' in feed and "Approved by reviewer@example.com via chat" in feed
    assert "fine by me" in feed and "Task completed" in feed and "wrote a.md" in feed
    assert re.search(r'data-metric="toolCalls" data-count>1<', feed)
    assert data_attr(page, "last-seq") == "9" and data_attr(page, "final") == "true"
    assert 'class="statusbar status-completed"' in page


async def test_the_socket_client_is_served_from_node_modules(app: Quart) -> None:
    response = await app.test_client().get("/vendor/socket.io.min.js")
    assert response.status_code == 200, "run `npm ci` (the README's set-up commands do)"
    assert "javascript" in response.headers["Content-Type"]
    assert "Socket.IO" in (await response.get_data(as_text=True))[:400]
    assert (await app.test_client().get("/vendor/package.json")).status_code == 404
    assert (await app.test_client().get("/vendor/..%2Fpackage.json")).status_code == 404


async def test_the_page_names_the_agent_the_step_a_card_guards_and_a_coded_failure(
    app: Quart, settings: Settings
) -> None:
    db = database(app)
    execution_id = await new_execution(db, settings)
    guards = {"step": 2, "tool": "send_email", "instruction": 'email press@acme.example saying "we grew"'}
    async with db.transaction() as session:
        await append_any_event(
            session,
            execution_id,
            "checkpoint.awaiting_review",
            {
                "checkpointId": "chk_1",
                "stage": "Press",
                "verificationQuestion": "OK to tell the press?",
                "origin": "caller",
                "attempt": 1,
                "nextAction": {"tool": "send_email", "args": {"to": "press@acme.example"}, "instruction": "x"},
                "guards": guards,
            },
        )
        error = {"code": "tool_failed", "detail": "Step 2 failed: refused", "step": 2, "tool": "send_email"}
        await append_any_event(session, execution_id, "execution.failed", {"status": "failed", "error": error})
    status, page, _ = await get(app, chat_path(settings, execution_id))
    assert status == 200
    assert re.search(r'<dd id="agent">offline \(rule-based\)</dd>', page)
    assert "step 2, send_email: email press@acme.example saying &#34;we grew&#34;" in page
    # The failure's sentence, not the object's repr.
    assert "Step 2 failed: refused" in page and "tool_failed" not in page.split('id="feed"', 1)[1]


async def test_the_script_gets_the_event_types_from_the_page(app: Quart, settings: Settings) -> None:
    execution_id = await new_execution(database(app), settings)
    status, page, _ = await get(app, chat_path(settings, execution_id))
    assert status == 200
    found = re.search(r'<script type="application/json" id="vocabulary">(.*?)</script>', page, re.S)
    assert found, "no vocabulary block"
    vocabulary = json.loads(found.group(1))
    assert vocabulary["eventTypes"] == {member.name: member.value for member in EventType}
    assert vocabulary["outcomes"] == {f"execution.{status}": status for status in FINAL}
    # …and keeps no copy of its own: no event type is spelled out in the script.
    script = (Path(__file__).parents[2] / "static" / "js" / "chat-view.js").read_text()
    assert [t.value for t in EventType if f'"{t.value}"' in script or f"'{t.value}'" in script] == []
