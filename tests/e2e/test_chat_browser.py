"""The chat in a real browser (Debian's chromium) against a real server and a real worker.

Two shapes of the service: the embedded one (`vouch serve`: web, worker and Socket.IO in one process, no
Redis), and the scaled-out one (a web process whose Socket.IO manager listens on Redis, and a worker that
emits through Redis), where the page is opened before the worker starts so that every step arrives live.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import pytest
import sqlalchemy as sa
from playwright.async_api import Browser, BrowserContext, Dialog, Page, WebSocketRoute, async_playwright

from agents.worker import Worker
from chat.fanout import WorkerEmitter
from core.db import Database
from core.models import Decision, Execution, MailMessage
from core.redis_bus import RedisBus
from core.settings import Settings
from tests.chat.helpers import REDIS_URL, REVIEWER, sign_in
from tests.conftest import make_account
from tests.support.live import HTTP_TIMEOUT, live_server
from tests.support.waiting import until

CHROMIUM_ARGS = [
    "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
    "--no-first-run", "--disable-sync", "--disable-dev-shm-usage",
]  # fmt: skip
TASK = (
    'Write a note called "plan.md" saying "Checklist ready". '
    'Then send an email to ops@example.com with subject "Release" and body "Version 2 is out". '
    "Then summarise the work."
)
XSS = "<img src=x onerror=alert(1)>"
# Item per row as the reader sees it: what a live page and a reloaded page must agree on.
SNAPSHOT = "() => [...document.querySelectorAll('#feed > li')].map(li => [li.dataset.seq, li.className, li.innerText])"


@pytest.fixture
async def browser() -> AsyncIterator[Browser]:
    async with async_playwright() as playwright:
        launched = await playwright.chromium.launch(executable_path="/usr/bin/chromium", args=CHROMIUM_ARGS)
        yield launched
        await launched.close()


@pytest.fixture
def web_settings(settings: Settings) -> Settings:
    return settings.with_changes(base_url=None)


@pytest.fixture
def embedded(web_settings: Settings) -> Iterator[str]:
    """`vouch serve`: web app, Socket.IO and a worker in one process, nothing shared through Redis."""
    with live_server(web_settings, run_worker=True) as base:
        yield base


@pytest.fixture
def scaled_web(web_settings: Settings) -> Iterator[str]:
    """`vouch web` with Redis: no worker of its own."""
    with live_server(web_settings.with_changes(redis_url=REDIS_URL), run_worker=False) as base:
        yield base


@contextlib.asynccontextmanager
async def worker_running(settings: Settings) -> AsyncIterator[None]:
    """A worker set up as `vouch worker` sets itself up with Redis: wake-ups and chat events through Redis."""
    bus = RedisBus(REDIS_URL)
    emitter = WorkerEmitter(REDIS_URL, bus.publisher)
    database = Database(settings.database_url, bus)
    database.add_event_sink(emitter.sink)
    stop = asyncio.Event()
    task = asyncio.create_task(Worker(settings.with_changes(redis_url=REDIS_URL), database).run(stop))
    try:
        yield
    finally:
        stop.set()
        await task
        await database.dispose()
        await bus.close()
        await emitter.close()


async def create_task(base: str, key: str, **fields: Any) -> dict[str, Any]:
    body = {"taskName": "Release", "taskDescription": TASK, "testMode": "without-verification", **fields}
    async with httpx.AsyncClient(
        timeout=HTTP_TIMEOUT, base_url=base, headers={"Authorization": f"Bearer {key}"}
    ) as client:
        created = await client.post("/api/eval/create-task-agent", json=body)
    assert created.status_code == 201, created.text
    answer: dict[str, Any] = created.json()
    return answer


async def open_chat(context: BrowserContext, url: str) -> Page:
    page = await context.new_page()
    errors: list[str] = []

    async def dialog_opened(dialog: Dialog) -> None:
        errors.append(f"a dialog opened: {dialog.message}")
        await dialog.dismiss()

    page.on("dialog", dialog_opened)
    page.on("pageerror", lambda error: errors.append(str(error)))
    page.on("console", lambda message: errors.append(message.text) if message.type == "error" else None)
    websockets: list[str] = []
    page.on("websocket", lambda socket: websockets.append(socket.url))
    page.set_default_timeout(20_000)
    await page.goto(url)
    await page.wait_for_selector("#chat[data-joined=true]", state="attached")
    page.errors = errors  # type: ignore[attr-defined]
    page.websockets = websockets  # type: ignore[attr-defined]
    return page


async def reviewer_context(browser: Browser, db: Database, settings: Settings, base: str) -> BrowserContext:
    """A browser signed in as the assigned reviewer (the session made directly; signing in has its own tests)."""
    cookie, _ = await sign_in(db, settings.secret_key, REVIEWER)
    name, value = cookie.split("=", 1)
    context = await browser.new_context()
    # As the server sets it (Secure, host-only, path /); chromium treats 127.0.0.1 as a secure origin.
    host = base.split("://", 1)[1].split(":", 1)[0]
    cookie_fields = {"name": name, "value": value, "domain": host, "path": "/", "secure": True, "httpOnly": True}
    await context.add_cookies([cookie_fields])  # type: ignore[list-item]
    return context


def assert_each_seq_once_in_order(items: list[list[str]]) -> None:
    seqs = [int(seq) for seq, _, _ in items]
    assert seqs == sorted(set(seqs)), seqs


async def last_seq(db: Database, execution_id: str) -> int:
    async with db.reading() as session:
        return int(await session.scalar(sa.select(Execution.last_seq).where(Execution.id == execution_id)) or 0)


async def test_watching_an_execution_from_queued_to_completed(
    browser: Browser, scaled_web: str, db: Database, web_settings: Settings
) -> None:
    account = await make_account(db, web_settings, "owner@example.com")
    created = await create_task(scaled_web, account.key)
    page = await open_chat(await browser.new_context(), created["chatUrl"])
    assert await page.text_content("#status-text") == "Queued: waiting for a worker"
    assert await page.text_content("#conn") == "Live"

    async with worker_running(web_settings):
        await page.wait_for_selector(".outcome-card.status-completed [data-part=metrics]:not([hidden])")
    live = await page.evaluate(SNAPSHOT)
    assert await page.text_content("#status-text") == "Completed"
    assert await page.locator(".item.tool.done").count() == 3
    assert await page.locator(".item.tool .badge.world:visible").count() == 1  # the e-mail acts on the world
    assert await page.text_content("[data-metric=steps]") == "3"
    assert_each_seq_once_in_order(live)
    assert int(await page.get_attribute("#chat", "data-last-seq") or 0) == await last_seq(db, created["executionId"])
    # Built live, event by event, the page reads exactly as the server renders the same history.
    await page.reload()
    await page.wait_for_selector("#chat[data-joined=true]", state="attached")
    assert await page.evaluate(SNAPSHOT) == live
    assert page.errors == []  # type: ignore[attr-defined]


async def test_approving_from_the_card_lets_the_run_continue(
    browser: Browser, embedded: str, db: Database, web_settings: Settings
) -> None:
    account = await make_account(db, web_settings, "owner@example.com")
    checkpoint = {"stage": "Send", "description": "The release mail", "verificationQuestion": "Send it to ops?"}
    created = await create_task(
        embedded, account.key, testMode="with-verification", assignedReviewer=REVIEWER, checkpoints=[checkpoint]
    )
    context = await reviewer_context(browser, db, web_settings, embedded)
    page = await open_chat(context, f"{embedded}/chat/{created['executionId']}")
    form = page.locator("form.cp-form")
    await form.wait_for(state="visible")
    # The signed-in page's two live parts, the chat and the navigation's review count, share one connection.
    await page.wait_for_selector("html[data-lists-watched=true]", state="attached")
    assert await page.text_content("#nav-count") == "1"
    assert len(page.websockets) == 1, page.websockets  # type: ignore[attr-defined]
    card = page.locator(".checkpoint")
    assert "Send it to ops?" in (await card.inner_text())
    assert "send_email" in (await card.inner_text())  # what the agent will do next
    # The step the checkpoint is bound to, by its number in the plan.
    guards = await card.locator(".cp-guards").inner_text()
    assert re.fullmatch(r"(?i:guards)\s+step 2, send_email: send an email to ops@example\.com .*", guards), guards
    assert await page.text_content("#status-text") == f"Waiting for review by {REVIEWER}"
    await form.locator("textarea[name=comment]").fill("Ship it")
    await form.locator("button[value=approve]").click()
    await page.wait_for_selector(".checkpoint.state-approved")
    await form.wait_for(state="hidden")
    await page.wait_for_selector(".outcome-card.status-completed")
    assert "Ship it" in await page.inner_text(".item.reply")
    assert f"Approved by {REVIEWER} via chat" in await card.inner_text()
    async with db.reading() as session:
        decision = await session.scalar(sa.select(Decision).where(Decision.execution_id == created["executionId"]))
    assert decision is not None
    assert (decision.via, decision.decided_by, decision.comment) == ("chat", REVIEWER, "Ship it")
    await page.wait_for_selector("#nav-count", state="hidden")  # the count heard of the decision on that connection
    assert len(page.websockets) == 1, page.websockets  # type: ignore[attr-defined]
    assert page.errors == []  # type: ignore[attr-defined]


async def test_reloading_mid_run_shows_the_whole_history_once(
    browser: Browser, embedded: str, db: Database, web_settings: Settings
) -> None:
    account = await make_account(db, web_settings, "owner@example.com")
    checkpoints = [
        {"stage": "Draft", "description": "The note", "verificationQuestion": "Is the note right?"},
        {"stage": "Send", "description": "The mail", "verificationQuestion": "Send it?"},
    ]
    created = await create_task(
        embedded, account.key, testMode="with-verification", assignedReviewer=REVIEWER, checkpoints=checkpoints
    )
    context = await reviewer_context(browser, db, web_settings, embedded)
    page = await open_chat(context, f"{embedded}/chat/{created['executionId']}")
    await page.locator("form.cp-form").first.wait_for(state="visible")
    await page.locator("form.cp-form button[value=approve]").first.click()
    # Paused again at the second checkpoint: mid-run.
    await page.wait_for_selector(".checkpoint.state-awaiting:has-text('Send it?') form.cp-form:visible")
    before = await page.evaluate(SNAPSHOT)
    assert_each_seq_once_in_order(before)
    await page.reload()
    await page.wait_for_selector("#chat[data-joined=true]", state="attached")
    after = await page.evaluate(SNAPSHOT)
    assert after == before
    await page.locator("form.cp-form:visible button[value=approve]").click()
    # The outcome first, then its metrics (the server's numbers, asked for once the run ended).
    await page.wait_for_selector(".outcome-card.status-completed [data-part=metrics]:not([hidden])")
    done = await page.evaluate(SNAPSHOT)
    # The same items as before (the second card now decided, the call it held back now done), then the rest of
    # the run: nothing twice.
    def kinds(rows: list[list[str]]) -> list[tuple[str, str]]:
        return [(row[0], row[1].replace(" done", "")) for row in rows]

    assert kinds(done[: len(before)]) == kinds(before)
    assert_each_seq_once_in_order(done)
    await page.reload()
    await page.wait_for_selector("#chat[data-joined=true]", state="attached")
    assert await page.evaluate(SNAPSHOT) == done
    assert [cls for _, cls, _ in done].count("item card-item") == 2
    assert [cls for _, cls, _ in done].count("item reply approve") == 2
    assert page.errors == []  # type: ignore[attr-defined]


async def test_approving_from_the_card_with_an_edited_subject(
    browser: Browser, embedded: str, db: Database, web_settings: Settings
) -> None:
    account = await make_account(db, web_settings, "owner@example.com")
    created = await create_task(
        embedded,
        account.key,
        taskDescription='Send an email to ops@example.com with subject "Weekly" and body "All green"',
        testMode="with-verification",
        assignedReviewer=REVIEWER,
        autoDetectCheckpoints=True,
    )
    page = await open_chat(await reviewer_context(browser, db, web_settings, embedded), created["chatUrl"])
    form = page.locator("form.cp-form")
    await form.wait_for(state="visible")
    card = page.locator(".checkpoint")
    # Every argument of the gated call, in full, and the offline agent's honest note.
    assert await card.locator(".cp-args pre").all_inner_texts() == ["ops@example.com", "Weekly", "All green"]
    assert "This agent cannot read comments: a rejection ends the run; edit the action to change it." in (
        await card.inner_text()
    )
    await form.locator("summary", has_text="Edit the arguments").click()
    subject = form.locator("textarea[data-arg=subject]")
    assert await subject.input_value() == "Weekly"
    await subject.fill("Weekly\nBcc: eve@example.com")
    await form.locator("button[value=approve]").click()
    await page.wait_for_selector(".cp-arg-error:visible:has-text('subject must be a single line')")
    final = "Weekly <i>final</i>"  # markup in an edit is text on every surface
    await subject.fill(final)
    await form.locator("button[value=approve]").click()
    await page.wait_for_selector(".checkpoint.state-approved")
    await page.wait_for_selector(".outcome-card.status-completed")
    # The reply says what was edited, and the call shows the arguments it ran with, the proposal beside them:
    # live, and the same once the page is rendered by the server.
    for rendered in ("live", "reloaded"):
        edits = page.locator(".item.reply.approve [data-part=edits]")
        assert await edits.is_visible(), rendered
        assert await edits.locator("dt").all_inner_texts() == ["subject"]
        assert await edits.locator("dd pre").all_inner_texts() == [final]
        call = page.locator(".item.tool", has_text="send_email")
        ran = json.loads(await call.locator("[data-slot=argsText]").text_content() or "")
        proposed = json.loads(await call.locator("[data-slot=proposedText]").text_content() or "")
        assert (ran["subject"], ran["to"], proposed["subject"]) == (final, "ops@example.com", "Weekly"), rendered
        assert await call.locator("[data-part=edited]").get_attribute("hidden") is None, rendered
        assert await call.locator("[data-part=proposed]").get_attribute("hidden") is None, rendered
        assert await page.locator("#feed i").count() == 0
        if rendered == "live":
            await page.reload()
            await page.wait_for_selector("#chat[data-joined=true]", state="attached")
    async with db.reading() as session:
        decision = await session.scalar(sa.select(Decision).where(Decision.execution_id == created["executionId"]))
        subjects = list(
            await session.scalars(
                sa.select(MailMessage.subject).where(
                    MailMessage.execution_id == created["executionId"], MailMessage.message_key.like("tool:%")
                )
            )
        )
    assert decision is not None
    assert (decision.via, decision.edited_args) == ("chat", {"subject": final})
    assert subjects == [final]
    # The refused edit's answer is an answer, not an error: the page logged nothing.
    assert page.errors == []  # type: ignore[attr-defined]


async def test_a_link_holder_sees_the_card_but_no_buttons_and_the_decision_within_a_second(
    browser: Browser, embedded: str, db: Database, web_settings: Settings
) -> None:
    account = await make_account(db, web_settings, "owner@example.com")
    checkpoint = {"stage": "Send", "description": "The release mail", "verificationQuestion": "Send it to ops?"}
    # maxRevisions 0: this rejection ends the run (revising is tests/e2e/test_browser_inbox.py's).
    created = await create_task(
        embedded,
        account.key,
        testMode="with-verification",
        assignedReviewer=REVIEWER,
        checkpoints=[checkpoint],
        maxRevisions=0,
    )
    onlooker = await open_chat(await browser.new_context(), created["chatUrl"])
    await onlooker.wait_for_selector(".checkpoint.state-awaiting")
    assert await onlooker.locator("#feed button:visible, #feed textarea:visible").count() == 0
    assert await onlooker.text_content(".cp-wait") == f"Waiting for {REVIEWER} to decide."
    assert await onlooker.locator("#you-decide").count() == 0

    reviewer = await open_chat(await reviewer_context(browser, db, web_settings, embedded), created["chatUrl"])
    # A rejection needs a comment, on the card as everywhere: refused on the page, nothing sent.
    await reviewer.locator("form.cp-form button[value=reject]").click()
    await reviewer.wait_for_selector(".cp-error:has-text('a rejection needs a comment')")
    await reviewer.locator("form.cp-form textarea[name=comment]").fill("Not to ops")
    await reviewer.locator("form.cp-form button[value=reject]").click()
    await reviewer.wait_for_selector(".checkpoint.state-rejected")
    await onlooker.wait_for_selector(".checkpoint.state-rejected", timeout=1000)
    await onlooker.wait_for_selector(".outcome-card.status-rejected")
    assert await onlooker.text_content("#status-text") == "Rejected"
    assert onlooker.errors == [] and reviewer.errors == []  # type: ignore[attr-defined]


async def test_a_hostile_task_name_and_text_render_as_text(
    browser: Browser, scaled_web: str, db: Database, web_settings: Settings
) -> None:
    account = await make_account(db, web_settings, "owner@example.com")
    hostile = f"Write a note saying hi. Then do <script>alert(2)</script> {XSS}."
    created = await create_task(scaled_web, account.key, taskName=XSS, taskDescription=hostile)
    page = await open_chat(await browser.new_context(), created["chatUrl"])
    async with worker_running(web_settings):
        # It does not understand "do <script>…": the whole task fails, quoting the instruction.
        await page.wait_for_selector(".outcome-card.status-failed")
    for attempt in ("live", "reloaded"):
        assert await page.text_content("#task-name") == XSS, attempt
        assert await page.locator("img").count() == 0, attempt
        # theme.js, socket.io.min.js and chat.js (a module), beside the vocabulary's JSON data block (never executed)
        scripts = "[...document.scripts].map(s => [s.type || 'text/javascript', s.src && new URL(s.src).pathname])"
        assert sorted(await page.evaluate(scripts)) == [
            ["application/json", ""], ["module", "/static/js/chat.js"],
            ["text/javascript", "/static/js/theme.js"], ["text/javascript", "/vendor/socket.io.min.js"],
        ]  # fmt: skip
        detail = await page.locator(".outcome-card .outcome-detail").first.inner_text()
        assert "<script>alert(2)</script>" in detail, attempt  # the agent quotes what it did not understand
        await page.reload()
        await page.wait_for_selector("#chat[data-joined=true]", state="attached")
    assert page.errors == []  # type: ignore[attr-defined]


async def test_an_approval_clicked_before_the_page_is_connected_is_sent_once_it_is(
    browser: Browser, embedded: str, db: Database, web_settings: Settings
) -> None:
    """The card's buttons are there as the page loads, before its socket connects (a slow network, a loaded
    server): a click then waits for the connection instead of doing nothing."""
    account = await make_account(db, web_settings, "owner@example.com")
    checkpoint = {"stage": "Send", "description": "The release mail", "verificationQuestion": "Send it to ops?"}
    created = await create_task(
        embedded, account.key, testMode="with-verification", assignedReviewer=REVIEWER, checkpoints=[checkpoint]
    )

    async def paused() -> bool | None:
        # The card must be in the page as the server renders it: with the socket held, nothing arrives later.
        async with db.reading() as session:
            status = await session.scalar(sa.select(Execution.status).where(Execution.id == created["executionId"]))
        return True if status == "awaiting_review" else None

    await until(paused, timeout=20)
    context = await reviewer_context(browser, db, web_settings, embedded)
    page = await context.new_page()
    page.set_default_timeout(20_000)
    released = asyncio.Event()

    async def held(route: WebSocketRoute) -> None:
        await released.wait()
        route.connect_to_server()

    await page.route_web_socket(re.compile(r".*/socket\.io/.*"), held)
    await page.goto(f"{embedded}/chat/{created['executionId']}")
    form = page.locator("form.cp-form")
    await form.wait_for(state="visible")
    await form.locator("button[value=approve]").click()
    assert await page.get_attribute("#chat", "data-joined") is None  # the click came before any connection
    released.set()
    await page.wait_for_selector(".checkpoint.state-approved")
    await page.wait_for_selector(".outcome-card.status-completed")
    async with db.reading() as session:
        decisions = (
            await session.scalars(sa.select(Decision.via).where(Decision.execution_id == created["executionId"]))
        ).all()
    assert decisions == ["chat"]
