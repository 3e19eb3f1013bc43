"""A real browser on the execution page: the server-drawn timeline has one bar per review wait."""

from __future__ import annotations

from playwright.async_api import Browser, expect

from core.accounts import create_user
from core.db import Database
from core.settings import Settings
from tests.e2e.test_browser_keys import PASSWORD, chromium  # noqa: F401  (the browser fixture)
from tests.support.live import at_own_address, live_server
from tests.support.scripted_run import rejected_then_approved

EMAIL = "timeline@example.com"


async def test_timeline_has_one_bar_per_review_wait(settings: Settings, db: Database, chromium: Browser) -> None:  # noqa: F811
    async with db.transaction() as session:
        user = await create_user(session, EMAIL, PASSWORD)
        user_id = user.id
    # Rejected once, then approved: two waits of the same checkpoint.
    execution_id = await rejected_then_approved(user_id, task_name="Two reviews").write(db)
    own, port = at_own_address(settings)
    with live_server(own, run_worker=False, port=port) as base:
        context = await chromium.new_context(base_url=base)
        page = await context.new_page()
        problems: list[str] = []
        # A CSP violation (inline script or style) shows only as a console error; there must be none.
        page.on("console", lambda msg: problems.append(msg.text) if msg.type == "error" else None)
        page.on("pageerror", lambda error: problems.append(str(error)))
        await page.goto("/signin")
        await page.get_by_label("E-mail").fill(EMAIL)
        await page.get_by_label("Password").fill(PASSWORD)
        await page.get_by_role("button", name="Sign in").click()
        # Signed in (the form's answer has landed) before the next click: a click on the sign-in page's own
        # navigation could otherwise be overtaken by that answer.
        await expect(page).to_have_url(f"{base}/keys")
        await page.get_by_role("link", name="Executions").first.click()
        await expect(page).to_have_url(f"{base}/executions")
        await page.get_by_label("Name").fill("two")
        await page.get_by_role("button", name="Filter").click()
        await page.get_by_role("link", name="Two reviews").click()
        await expect(page).to_have_url(f"{base}/executions/{execution_id}")

        timeline = page.locator("svg#timeline")
        await expect(timeline).to_be_visible()
        waits = timeline.locator("rect[data-kind=review-wait]")
        await expect(waits).to_have_count(2)
        await expect(waits.nth(0).locator("title")).to_have_text("1. Draft, attempt 1: waited 10.0 s (rejected)")
        await expect(waits.nth(1).locator("title")).to_have_text("1. Draft, attempt 2: waited 30.0 s (approved)")
        # Drawn, not just present: each bar has a width on screen, the second three times the first.
        first, second = await waits.nth(0).bounding_box(), await waits.nth(1).bounding_box()
        assert first is not None and second is not None
        assert first["width"] > 0 and abs(second["width"] / first["width"] - 3) < 0.05
        assert second["x"] > first["x"] + first["width"]
        await expect(timeline.locator("rect[data-kind=tool-call]")).to_have_count(3)
        # The colours come from the stylesheet (no inline style is allowed): an approved wait is green.
        fill = await waits.nth(1).evaluate("el => getComputedStyle(el).fill")
        assert fill == "rgb(90, 164, 105)"
        assert problems == []
        await context.close()
