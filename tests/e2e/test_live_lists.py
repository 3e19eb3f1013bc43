# ruff: noqa: F811 (the fixtures imported from test_chat_browser are parameters here)
"""The review inbox, the executions list and the navigation's review count update by themselves, in a real browser
(Debian's chromium), for the people concerned only: a web process listening on Redis, a worker publishing through
it, pages open before anything happens."""

from __future__ import annotations

from playwright.async_api import Browser, BrowserContext, Page

from core.db import Database
from core.settings import Settings
from tests.chat.helpers import REVIEWER, sign_in
from tests.conftest import make_account
from tests.e2e.test_chat_browser import (  # noqa: F401 (fixtures)
    browser,
    create_task,
    open_chat,
    reviewer_context,
    scaled_web,
    web_settings,
    worker_running,
)

OWNER = "owner@example.com"
STRANGER = "stranger@example.com"


async def signed_in(browser: Browser, db: Database, settings: Settings, base: str, email: str) -> BrowserContext:
    cookie, _ = await sign_in(db, settings.secret_key, email)
    name, value = cookie.split("=", 1)
    context = await browser.new_context()
    host = base.split("://", 1)[1].split(":", 1)[0]
    await context.add_cookies([{"name": name, "value": value, "domain": host, "path": "/", "secure": True}])  # type: ignore[list-item]
    return context


async def open_list(context: BrowserContext, url: str) -> Page:
    page = await context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    page.on("console", lambda message: errors.append(message.text) if message.type == "error" else None)
    page.set_default_timeout(20_000)
    await page.goto(url)
    await page.wait_for_selector("html[data-lists-watched=true]", state="attached")
    page.errors = errors  # type: ignore[attr-defined]
    return page


async def test_the_inbox_the_executions_list_and_the_count_follow_the_run(
    browser: Browser,
    scaled_web: str,
    db: Database,
    web_settings: Settings,
) -> None:
    account = await make_account(db, web_settings, OWNER)
    await make_account(db, web_settings, STRANGER)
    inbox = await open_list(await reviewer_context(browser, db, web_settings, scaled_web), f"{scaled_web}/review/inbox")
    owner = await open_list(await signed_in(browser, db, web_settings, scaled_web, OWNER), f"{scaled_web}/executions")
    stranger = await open_list(
        await signed_in(browser, db, web_settings, scaled_web, STRANGER), f"{scaled_web}/executions"
    )
    assert await inbox.locator("#live-list tr.waiting").count() == 0
    assert await inbox.locator("#nav-count").is_hidden()
    assert await owner.text_content("#count") == "0 executions."

    checkpoint = {"stage": "Send", "description": "The release mail", "verificationQuestion": "Send it to ops?"}
    created = await create_task(
        scaled_web, account.key, testMode="with-verification", assignedReviewer=REVIEWER, checkpoints=[checkpoint]
    )
    # Created (no worker yet): on the owner's list at once.
    await owner.wait_for_selector("#live-list .status.queued")
    assert await owner.text_content("#count") == "1 execution."

    async with worker_running(web_settings):
        await inbox.wait_for_selector("#live-list tr.waiting:has-text('Send')")
        await inbox.wait_for_selector("#nav-count:text-is('1')")
        await owner.wait_for_selector("#live-list .status.awaiting_review")
        chat = await open_chat(inbox.context, created["chatUrl"])
        assert await chat.text_content("#nav-count") == "1"  # the count on every signed-in page
        await chat.locator("form.cp-form button[value=approve]").click()
        await owner.wait_for_selector("#live-list .status.completed")
        await inbox.wait_for_selector("#live-list tr.waiting", state="detached")
        await inbox.wait_for_selector("#nav-count", state="hidden")
    # The stranger's page heard nothing of it: its list was never fetched again, and shows nothing of theirs.
    assert await stranger.get_attribute("#live-list", "data-refreshed") is None
    assert await stranger.text_content("#count") == "0 executions."
    assert await inbox.locator("#live-list").get_attribute("data-refreshed") is not None
    assert inbox.errors == [] and owner.errors == [] and stranger.errors == []  # type: ignore[attr-defined]
