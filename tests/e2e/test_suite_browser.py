"""A suite's comparison page in a real browser (Debian's chromium) against a real server and worker: two models (the
offline agent and a priced model profile served by a local OpenAI-compatible fake), both test modes, one run
rejected by its reviewer while the page is open. Every number the page draws is checked against the API's record
of the same suite, the grid's links lead to each run's chat, and another user gets a 404."""

from __future__ import annotations

from typing import Any

from playwright.async_api import Browser, BrowserContext, Dialog, Page, expect
from vouch_client import AsyncClient

from core.db import Database
from core.model_profiles import ModelProfile
from core.settings import Settings
from tests.chat.helpers import sign_in
from tests.conftest import make_account
from tests.e2e.test_browser_keys import chromium  # noqa: F401  (the browser fixture)
from tests.support.fake_llm import call, fake_llm
from tests.support.live import at_own_address, live_server
from tests.support.waiting import until

OWNER = "suites@example.com"
XSS = "<img src=x onerror=alert(1)>"
PASSES = [{"type": "regex", "pattern": "."}]


def tasks() -> list[dict[str, Any]]:
    plain = {
        "taskName": "Write a note",
        "taskDescription": 'Write a note called "a.md" saying "hello". Then summarise.',
        "scorers": PASSES,
    }
    reviewed = {
        "taskName": XSS,
        "taskDescription": 'Write a note called "notes.md" saying "v2 is out". '
        'Then send an email to team@example.com with subject "v2" and body "v2 is out". Then summarise.',
        "assignedReviewer": OWNER,
        "maxRevisions": 0,
        "checkpoints": [{"stage": "Send", "verificationQuestion": "Send it?"}],
        "scorers": PASSES,
    }
    return [plain, reviewed]


async def signed_in(browser: Browser, db: Database, settings: Settings, base: str, email: str) -> BrowserContext:
    cookie, _ = await sign_in(db, settings.secret_key, email)
    name, value = cookie.split("=", 1)
    context = await browser.new_context(base_url=base)
    fields = {"name": name, "value": value, "domain": "127.0.0.1", "path": "/", "secure": True, "httpOnly": True}
    await context.add_cookies([fields])  # type: ignore[list-item]
    return context


async def watched_page(context: BrowserContext, problems: list[str]) -> Page:
    page = await context.new_page()
    page.set_default_timeout(20_000)

    async def dialog(opened: Dialog) -> None:
        problems.append(f"a dialog opened: {opened.message}")
        await opened.dismiss()

    page.on("dialog", dialog)
    # A CSP violation (an inline script or style) shows only as a console error: there must be none.
    page.on("console", lambda message: problems.append(message.text) if message.type == "error" else None)
    page.on("pageerror", lambda error: problems.append(str(error)))
    return page


async def centre_x(page: Page, selector: str) -> float:
    box = await page.locator(selector).bounding_box()
    assert box is not None, selector
    return float(box["x"] + box["width"] / 2)


async def test_the_comparison_page_draws_what_the_api_says(
    settings: Settings,
    db: Database,
    chromium: Browser,  # noqa: F811
) -> None:
    owner = await make_account(db, settings, OWNER)
    stranger = await make_account(db, settings, "stranger@example.com")
    async with fake_llm(then=lambda _body: call("finish", summary="done")) as llm:
        profile = ModelProfile(
            "cheap", "openai", "local-model", base_url=llm.base_url, input_usd_per_mtok=1.0, output_usd_per_mtok=2.0
        )
        own, port = at_own_address(settings.with_changes(model_profiles=(profile,), agent_request_retries=0))
        with live_server(own, run_worker=True, port=port) as base:
            async with AsyncClient(base, owner.key) as client:
                body = {"name": f"Nightly {XSS}", "tasks": tasks(), "models": ["offline", "cheap"], "testMode": "both"}
                created = await client.create_suite(body)
                suite_id = created.suiteId
                assert created.runs == 8

                async def waiting_run() -> Any:
                    runs = client.iter_suite_runs(suite_id)
                    return next(
                        (r for r in [r async for r in runs] if r.status == "awaiting_review" and r.model == "offline"),
                        None,
                    )

                paused = await until(waiting_run, timeout=60)
                problems: list[str] = []
                context = await signed_in(chromium, db, own, base, OWNER)
                page = await watched_page(context, problems)
                response = await page.goto(f"/suites/{suite_id}")
                assert response is not None and response.status == 200
                await expect(page.locator("h1")).to_have_text(f"Nightly {XSS}")
                cell = page.locator(f'#grid a.run[href="{paused.chatUrl}"]')
                await expect(cell).to_have_class("run active")

                # Rejected while the page is open: the page follows without a reload.
                record = await client.status(paused.executionId)
                checkpoint = record.waiting_checkpoint()
                assert checkpoint is not None
                await client.decide(paused.executionId, checkpoint.checkpointId, "reject", "not this week")
                # The priced model's run of the same task stops at the same checkpoint: approved.

                async def other_waiting() -> Any:
                    runs = [r async for r in client.iter_suite_runs(suite_id)]
                    return next((r for r in runs if r.status == "awaiting_review" and r.model == "cheap"), None)

                approved = await until(other_waiting, timeout=60)
                waiting = (await client.status(approved.executionId)).waiting_checkpoint()
                assert waiting is not None
                await client.decide(approved.executionId, waiting.checkpointId, "approve")

                async def finished() -> Any:
                    suite = await client.suite(suite_id)
                    return suite if suite.status == "completed" else None

                suite = await until(finished, timeout=90)
                await expect(page.locator("#suite-status")).to_have_text("completed")
                await expect(cell).to_have_class("run failed")
                await expect(cell.locator(".count.rejects")).to_have_text("1 rej")

                await check_tables(page, suite, [r async for r in client.iter_suite_runs(suite_id)])
                await check_charts(page, suite)

                # Each run opens its chat.
                await cell.click()
                await expect(page).to_have_url(paused.chatUrl)
                await page.wait_for_selector("#chat[data-joined=true]", state="attached")
                assert problems == []

                # The list and the executions page lead here; another user finds nothing.
                listed = await watched_page(context, problems)
                await listed.goto("/executions")
                await listed.locator("#suites-link").click()
                await listed.get_by_role("link", name=f"Nightly {XSS}").click()
                await expect(listed).to_have_url(f"{base}/suites/{suite_id}")
                other = await signed_in(chromium, db, own, base, stranger.email)
                elsewhere = await other.new_page()
                refused = await elsewhere.goto(f"/suites/{suite_id}")
                assert refused is not None and refused.status == 404
                await elsewhere.goto("/suites")
                await expect(elsewhere.locator("#suites")).to_have_count(0)
                assert problems == []
                await context.close()
                await other.close()


async def check_tables(page: Page, suite: Any, runs: list[Any]) -> None:
    rows = page.locator("#by-model tbody tr")
    await expect(rows).to_have_count(len(suite.byModel))
    for index, result in enumerate(suite.byModel):
        row = rows.nth(index)
        assert (await row.get_attribute("data-model"), await row.get_attribute("data-mode")) == (
            result.model,
            result.testMode,
        )
        shown = (await row.locator("td.pass-rate").inner_text()).strip()
        low, high = result.passRateInterval
        assert shown == f"{result.passRate * 100:.0f}% ({low * 100:.0f}%\u2013{high * 100:.0f}%)"  # an en dash

    # The grid: a row per task, a cell per model and mode, a link per run to its chat, marked as the API says.
    await expect(page.locator("#grid tbody tr")).to_have_count(2)
    await expect(page.locator("#grid tbody tr").nth(1).locator("th")).to_have_text(XSS)
    links = page.locator("#grid a.run")
    await expect(links).to_have_count(8)
    for run in runs:
        outcome = "passed" if run.passed else "failed"
        await expect(page.locator(f'#grid a.run[href="{run.chatUrl}"]')).to_have_class(f"run {outcome}")

    # For the two modes: the offline agent's reviewed task was rejected with review and passed without.
    oversight = page.locator("#oversight tbody tr")
    await expect(oversight).to_have_count(4)
    hurt = page.locator("#oversight tr.hurt")
    await expect(hurt).to_have_count(1)
    await expect(hurt.locator("td")).to_have_text(
        [XSS, "offline", "0/1 passed (1 rejected, 0 edited)", "1/1 passed", "worse with review"]
    )


async def check_charts(page: Page, suite: Any) -> None:
    # Pass rates on a 0-100 % axis: each dot where its rate falls between the axis' ends, its whisker the interval.
    zero = await centre_x(page, "#pass-rates line.tick >> nth=0")
    full = await centre_x(page, "#pass-rates line.tick >> nth=4")
    marks = page.locator("#pass-rates g.model-rate")
    await expect(marks).to_have_count(len(suite.byModel))
    for index, result in enumerate(suite.byModel):
        mark = f"#pass-rates g.model-rate >> nth={index}"
        assert await page.locator(mark).get_attribute("data-model") == f"{result.model} ({result.testMode})"
        assert abs(await centre_x(page, f"{mark} >> circle.rate") - (zero + (full - zero) * result.passRate)) < 1.5
        whisker = await page.locator(f"{mark} >> line.interval").bounding_box()
        assert whisker is not None
        low, high = result.passRateInterval
        assert abs(whisker["x"] - (zero + (full - zero) * low)) < 2.5
        assert abs(whisker["x"] + whisker["width"] - (zero + (full - zero) * high)) < 2.5
    fill = await page.locator("#pass-rates circle.rate").first.evaluate("el => getComputedStyle(el).fill")
    assert fill not in ("rgb(0, 0, 0)", "none")  # coloured by the stylesheet, not by an inline style

    # Cost against pass rate: the priced model's points, right of the free one's when both are drawn.
    drawn = [r for r in suite.byModel if r.costUsd is not None and r.passRate is not None]
    points = page.locator("#cost-scatter g.point")
    await expect(points).to_have_count(len(drawn))
    cheap = [r for r in suite.byModel if r.model == "cheap"]
    assert cheap and all(r.costUsd and r.costUsd > 0 for r in cheap)
    for result in drawn:
        point = page.locator(f'#cost-scatter g.point[data-model="{result.model} ({result.testMode})"]')
        assert float(await point.get_attribute("data-cost") or "nan") == result.costUsd
    not_drawn = [r for r in suite.byModel if r not in drawn]
    for result in not_drawn:
        await expect(page.locator("figure.chart p.muted")).to_contain_text(f"{result.model} ({result.testMode})")
