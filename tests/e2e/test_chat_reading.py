# ruff: noqa: F811 (the fixtures imported from test_chat_browser are parameters here)
"""The chat as people read it, in a real browser (Debian's chromium): the agent's Markdown (and what must never run
in it), the model's text streamed while it is written, dark mode, the tab title, the opt-in notification, the keys
on a card, and a status bar that covers nothing.

Live events come the scaled-out way (a web process listening on Redis, a worker publishing through it), the page
opened before the worker starts, so everything after the page's load arrives live.
"""

from __future__ import annotations

import asyncio
from typing import Any

import sqlalchemy as sa
from playwright.async_api import Browser, Page, expect

from core.db import Database
from core.events import append_any_event
from core.models import Event
from core.settings import Settings
from tests.chat.helpers import REVIEWER
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
from tests.support.fake_llm import Answer, fake_llm

MARKDOWN = (
    "## The plan\n\n"
    "- write the **note**\n"
    "- send the mail\n\n"
    "```python\nprint('<b>hi</b>')\n```\n\n"
    "| step | tool |\n|---|---|\n| 1 | write_file |\n| 2 | send_email |\n\n"
    "See [the docs](https://example.com/docs)."
)
HOSTILE = (
    "Click [here](javascript:window.__pwned='link') or <a href=\"javascript:window.__pwned='a'\">there</a>.\n\n"
    "<script>window.__pwned='script'</script>\n\n"
    "<img src=x onerror=\"window.__pwned='img'\"> ![pixel](x \"onerror\")\n\n"
    "<b onmouseover=\"window.__pwned='hover'\">bold?</b> [data](data:text/html,<script>alert(1)</script>)"
)
# What a rendered message holds, as the reader and the DOM see it.
SHAPE = """(li) => ({
  lists: li.querySelectorAll('.md ul > li').length,
  code: [...li.querySelectorAll('.md pre code')].map(c => c.textContent),
  cells: [...li.querySelectorAll('.md td')].map(c => c.textContent),
  links: [...li.querySelectorAll('.md a')].map(a => [a.getAttribute('href'), a.rel, a.target]),
  strong: [...li.querySelectorAll('.md strong')].map(s => s.textContent),
  heading: [...li.querySelectorAll('.md h2')].map(h => h.textContent),
  live: li.querySelectorAll('script, img, iframe, [onerror], [onmouseover], [onclick]').length,
  text: li.querySelector('.md').innerText,
})"""


async def agent_says(db: Database, execution_id: str, text: str) -> None:
    async with db.transaction() as session:
        await append_any_event(session, execution_id, "agent.message", {"text": text})


def messages(page: Page) -> Any:
    return page.locator("#feed > li.item.message:not(.streaming)")


async def test_agent_text_renders_as_markdown_and_nothing_hostile_in_it_runs(
    browser: Browser, scaled_web: str, db: Database, web_settings: Settings
) -> None:
    from chat.fanout import WorkerEmitter
    from core.bus import InProcessBus
    from tests.chat.helpers import REDIS_URL

    account = await make_account(db, web_settings, "owner@example.com")
    created = await create_task(scaled_web, account.key)
    await agent_says(db, created["executionId"], MARKDOWN)  # on the page as it loads
    page = await open_chat(await browser.new_context(), created["chatUrl"])
    # and live, through Redis as a worker's would
    emitter = WorkerEmitter(REDIS_URL)
    worker_db = Database(web_settings.database_url, InProcessBus())
    worker_db.add_event_sink(emitter.sink)
    try:
        await agent_says(worker_db, created["executionId"], HOSTILE)
        await agent_says(worker_db, created["executionId"], MARKDOWN)
        await messages(page).nth(2).wait_for()
    finally:
        await worker_db.dispose()
        await emitter.close()

    for attempt in ("live", "reloaded"):
        rendered, hostile, live_markdown = [await messages(page).nth(n).evaluate(SHAPE) for n in range(3)]
        assert rendered == live_markdown, attempt  # from the page's history and live: the same
        assert rendered["heading"] == ["The plan"]
        assert rendered["lists"] == 2
        assert rendered["strong"] == ["note"]
        assert rendered["code"] == ["print('<b>hi</b>')\n"]
        assert rendered["cells"] == ["1", "write_file", "2", "send_email"]
        assert rendered["links"] == [["https://example.com/docs", "noopener noreferrer nofollow", "_blank"]]
        assert rendered["live"] == 0
        # Hostile: every raw tag shown as the text it is; no link to javascript: or data:, nothing that loads.
        assert hostile["live"] == 0, (attempt, hostile)
        assert all(href is None or href.startswith(("http:", "https:")) for href, _, _ in hostile["links"]), hostile
        for shown in ("<script>window.__pwned='script'</script>", "<img src=x onerror=", "<b onmouseover="):
            assert shown in hostile["text"], (attempt, shown, hostile["text"])
        for link in await messages(page).nth(1).locator("a").all():
            await link.click()
        await messages(page).nth(1).locator("text=bold?").hover()
        assert await page.evaluate("window.__pwned") is None, attempt
        await page.reload()
        await page.wait_for_selector("#chat[data-joined=true]", state="attached")
    assert page.errors == []  # type: ignore[attr-defined]


async def test_the_models_text_appears_while_it_is_written_before_it_is_stored(
    browser: Browser, scaled_web: str, db: Database, web_settings: Settings
) -> None:
    written = asyncio.Event()
    answer = Answer(text="Here is **the plan**:\n\n- step one\n- step two\n\nAll done.", hold=written, hold_after=4)
    async with fake_llm(answer) as llm:
        settings = web_settings.with_changes(agent_base_url=llm.base_url)
        account = await make_account(db, settings, "owner@example.com")
        created = await create_task(scaled_web, account.key, agentModel="openai:scripted")
        page = await open_chat(await browser.new_context(), created["chatUrl"])
        async with worker_running(settings):
            streaming = page.locator("#feed > li.item.message.streaming")
            # The first four words, rendered as Markdown as they come; the rest is not written yet.
            await streaming.locator(".md strong", has_text="the plan").wait_for()
            assert "step one" not in await streaming.inner_text()
            async with db.reading() as session:
                stored = await session.scalar(
                    sa.select(sa.func.count()).where(
                        Event.execution_id == created["executionId"], Event.type == "agent.message"
                    )
                )
            assert stored == 0  # on the page, and not yet a message of record
            written.set()
            await page.wait_for_selector(".outcome-card.status-completed")
        assert await streaming.count() == 0  # the stored message took its place
        # the answer, and the run's summary (the same text: a text-only answer is the model's last word)
        assert await messages(page).count() == 2
        whole = await messages(page).first.evaluate(SHAPE)
        assert (whole["strong"], whole["lists"]) == (["the plan"], 2)
        await page.reload()
        await page.wait_for_selector("#chat[data-joined=true]", state="attached")
        assert await messages(page).first.evaluate(SHAPE) == whole  # the replay is the stored message, unchanged
    assert llm.requests[0]["stream"] is True
    assert page.errors == []  # type: ignore[attr-defined]


async def test_dark_mode_follows_the_system_and_the_toggle_is_remembered(
    browser: Browser, scaled_web: str, db: Database, web_settings: Settings
) -> None:
    account = await make_account(db, web_settings, "owner@example.com")
    created = await create_task(scaled_web, account.key)
    context = await browser.new_context(color_scheme="dark")
    page = await open_chat(context, created["chatUrl"])
    background = "() => getComputedStyle(document.documentElement).backgroundColor"
    card = "() => getComputedStyle(document.querySelector('.task')).backgroundColor"
    assert (await page.evaluate(background), await page.evaluate(card)) == ("rgb(18, 21, 27)", "rgb(27, 32, 41)")
    assert await page.text_content("#theme-toggle") == "Light mode"
    await page.click("#theme-toggle")
    assert (await page.evaluate(background), await page.evaluate(card)) == ("rgb(245, 247, 250)", "rgb(255, 255, 255)")
    await page.reload()
    await page.wait_for_selector("#chat[data-joined=true]", state="attached")
    assert await page.evaluate(background) == "rgb(245, 247, 250)"  # remembered over the system's dark
    await page.click("#theme-toggle")  # back to what the system says: following it again
    assert await page.evaluate(background) == "rgb(18, 21, 27)"
    assert await page.evaluate("localStorage.getItem('vouch.theme')") is None
    light = await open_chat(await browser.new_context(color_scheme="light"), created["chatUrl"])
    assert await light.evaluate(background) == "rgb(245, 247, 250)"
    assert page.errors == [] and light.errors == []  # type: ignore[attr-defined]


# Records each notification the page shows, and still shows it through the browser's own.
RECORD_NOTIFICATIONS = """
window.__notes = [];
const Real = window.Notification;
class Recorded extends Real {
  constructor(title, options) { super(title, options); window.__notes.push([title, options && options.body]); }
}
window.Notification = Recorded;
"""
COVERED = """() => {
  const band = document.querySelector('.statusband').getBoundingClientRect();
  const covered = [];
  for (const item of document.querySelectorAll('#feed > li')) {
    item.scrollIntoView();
    const box = item.getBoundingClientRect();
    if (box.top < band.bottom - 1) covered.push([item.dataset.seq, box.top, band.bottom]);
  }
  return covered;
}"""


async def test_title_notification_keys_and_nothing_under_the_status_bar(
    browser: Browser, scaled_web: str, db: Database, web_settings: Settings
) -> None:
    account = await make_account(db, web_settings, "owner@example.com")
    checkpoints = [
        {"stage": "Draft", "description": "The note", "verificationQuestion": "Is the note right?"},
        {"stage": "Send", "description": "The mail", "verificationQuestion": "Send it?"},
    ]
    created = await create_task(
        scaled_web, account.key, testMode="with-verification", assignedReviewer=REVIEWER, checkpoints=checkpoints,
        maxRevisions=0,
    )  # fmt: skip
    context = await reviewer_context(browser, db, web_settings, scaled_web)
    await context.grant_permissions(["notifications"], origin=scaled_web)
    await context.add_init_script(RECORD_NOTIFICATIONS)
    page = await open_chat(context, f"{scaled_web}/chat/{created['executionId']}")
    onlooker = await open_chat(await browser.new_context(), created["chatUrl"])
    assert await page.title() == "Queued · Release · Vouch"
    assert await onlooker.locator("#notify").is_hidden()  # it may not decide: nothing to be told
    await page.click("#notify")
    # The click asks for permission (a promise): the label changes once it is granted.
    await expect(page.locator("#notify")).to_have_text("Notifications on")

    async with worker_running(web_settings):
        await page.wait_for_function("() => document.title === 'Waiting for your review · Release · Vouch'")
        await onlooker.wait_for_function("() => document.title === 'Waiting for review · Release · Vouch'")
        assert await page.evaluate("window.__notes") == [["Waiting for your review", "Draft · Release"]]
        # a: approve, on the focused card
        first = page.locator(".checkpoint.state-awaiting")
        await first.focus()
        await page.keyboard.press("a")
        await page.wait_for_selector(".checkpoint.state-approved")
        await page.wait_for_selector(".checkpoint.state-awaiting:has-text('Send it?')")
        assert await page.evaluate("window.__notes.map(n => n[1])") == ["Draft · Release", "Send · Release"]
        # r: the comment box, focused; the rejection goes with Ctrl+Enter
        await page.locator(".checkpoint.state-awaiting").focus()
        await page.keyboard.press("r")
        assert await page.evaluate("document.activeElement.name") == "comment"
        await page.keyboard.type("Not to ops")
        assert await page.locator(".checkpoint.state-rejected").count() == 0  # typing r, a … in the box decides nothing
        await page.keyboard.press("Control+Enter")
        await page.wait_for_selector(".checkpoint.state-rejected")
        await page.wait_for_selector(".outcome-card.status-rejected")
    await page.wait_for_function("() => document.title === 'Rejected · Release · Vouch'")
    assert "Not to ops" in await page.inner_text(".item.reply.reject")
    # Whatever the page scrolls to stops below the status bar: nothing is under it.
    await page.set_viewport_size({"width": 420, "height": 500})
    assert await page.evaluate(COVERED) == []
    assert page.errors == [] and onlooker.errors == []  # type: ignore[attr-defined]
