"""The `human` scorer's grade (issue 23) on the chat card in a real browser: once the run has completed the card
offers Pass and Fail with a rating and labels; a Fail needs no comment; the page keeps saying the run completed."""

from __future__ import annotations

import sqlalchemy as sa
from playwright.async_api import Browser

from core.db import Database
from core.models import Decision, Execution
from core.settings import Settings
from tests.chat.helpers import REVIEWER
from tests.conftest import make_account
from tests.e2e.test_chat_browser import (  # noqa: F401 (fixtures)
    browser,
    create_task,
    embedded,
    open_chat,
    reviewer_context,
    web_settings,
)
from tests.support.waiting import until


async def test_grading_from_the_chat_card(
    browser: Browser,  # noqa: F811
    embedded: str,  # noqa: F811
    db: Database,
    web_settings: Settings,  # noqa: F811
) -> None:
    account = await make_account(db, web_settings, "owner@example.com")
    created = await create_task(
        embedded,
        account.key,
        taskDescription='Write a note called "plan.md" saying "ready".',
        agentModel="offline",
        assignedReviewer=REVIEWER,
        scorers=["human"],
    )
    context = await reviewer_context(browser, db, web_settings, embedded)
    page = await open_chat(context, f"{embedded}/chat/{created['executionId']}")
    form = page.locator(".card-item[data-origin=grade] form.cp-form")
    await form.wait_for(state="visible")
    assert await page.text_content("#status-text") == "Completed"
    assert await form.locator("button[value=reject]").inner_text() == "Fail"
    await form.locator("select[name=rating]").select_option("4")
    await form.locator("input[name=labels]").fill("tidy, short")
    await form.locator("button[value=reject]").click()
    await page.wait_for_selector(".card-item[data-origin=grade] .checkpoint.state-rejected")
    await form.wait_for(state="hidden")

    async def verdict() -> Execution | None:
        async with db.reading() as session:
            row = await session.get(Execution, created["executionId"], populate_existing=True)
        return row if row is not None and row.verdict_state == "done" else None

    execution = await until(verdict, timeout=15)
    assert (execution.status, execution.verdict_passed, execution.verdict_score) == ("completed", False, 0.75)
    async with db.reading() as session:
        decision = await session.scalar(sa.select(Decision).where(Decision.execution_id == created["executionId"]))
    assert decision is not None
    assert (decision.via, decision.rating, decision.labels, decision.comment) == ("chat", 4, ["tidy", "short"], "")
    await page.wait_for_selector("text=Verdict: failed (score 0.75)")
    assert await page.text_content("#status-text") == "Completed"
    assert page.errors == []  # type: ignore[attr-defined]
