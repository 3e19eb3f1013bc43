"""Review by e-mail without any mail server, in a real browser (Debian's chromium) against a real server
and its in-process worker: the reviewer signs in, opens the review mail in the dev mailbox, clicks Approve
in the message, confirms, and the run completes."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator

import httpx
import pytest
import sqlalchemy as sa
from playwright.async_api import Browser, Page, async_playwright, expect

from core.accounts import create_user
from core.db import Database
from core.models import Decision, Execution, MailMessage
from core.settings import Settings
from tests.conftest import make_account
from tests.review.mail_support import free_port
from tests.support.live import HTTP_TIMEOUT, live_server
from tests.support.waiting import until

CHROMIUM_ARGS = [
    "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
    "--no-first-run", "--disable-sync", "--disable-dev-shm-usage",
]  # fmt: skip
REVIEWER = "mailbox-reviewer@example.com"
PASSWORD = "correct horse battery"


@pytest.fixture
async def chromium() -> AsyncIterator[Browser]:
    async with async_playwright() as playwright:
        launched = await playwright.chromium.launch(executable_path="/usr/bin/chromium", args=CHROMIUM_ARGS)
        yield launched
        await launched.close()


async def status_of(db: Database, execution_id: str) -> str:
    async with db.reading() as session:
        return str(await session.scalar(sa.select(Execution.status).where(Execution.id == execution_id)))


async def test_approve_from_the_dev_mailbox(settings: Settings, db: Database, chromium: Browser) -> None:
    port = free_port()
    # The worker writes the mail's links with the public address: this server's, known before it starts.
    web = settings.with_changes(base_url=f"http://127.0.0.1:{port}", smtp_url=None, worker_poll_seconds=0.5)
    owner = await make_account(db, settings, "mailbox-owner@example.com")
    async with db.transaction() as session:
        await create_user(session, REVIEWER, PASSWORD)
    with live_server(web, run_worker=True, port=port) as base:
        async with httpx.AsyncClient(
            timeout=HTTP_TIMEOUT, base_url=base, headers={"Authorization": f"Bearer {owner.key}"}
        ) as api:
            created = await api.post(
                "/api/eval/create-task-agent",
                json={
                    "taskName": "Release note",
                    "taskDescription": 'Write a note called "release.md" saying "v2 is out". Then summarise.',
                    "assignedReviewer": REVIEWER,
                    "checkpoints": [{"stage": "Write the note", "verificationQuestion": "Write release.md?"}],
                },
            )
        assert created.status_code == 201, created.text
        execution_id = created.json()["executionId"]

        async def paused() -> bool | None:
            return True if await status_of(db, execution_id) == "awaiting_review" else None

        await until(paused, timeout=20)

        context = await chromium.new_context(base_url=base)
        page: Page = await context.new_page()
        problems: list[str] = []
        page.on("pageerror", lambda error: problems.append(str(error)))
        page.on("console", lambda msg: problems.append(msg.text) if msg.type == "error" else None)

        await page.goto("/signin")
        await page.get_by_label("E-mail").fill(REVIEWER)
        await page.get_by_label("Password").fill(PASSWORD)
        await page.get_by_role("button", name="Sign in").click()
        # Signed in (the form's answer has landed) before the next click: a click on the sign-in page's own
        # navigation could otherwise be overtaken by that answer.
        await expect(page).to_have_url(f"{base}/keys")
        await page.get_by_role("navigation").get_by_role("link", name="Mailbox").click()
        await expect(page).to_have_url(f"{base}/mailbox")
        await page.get_by_role("link", name="Review needed: Release note").click()
        await expect(page).to_have_url(re.compile(r"/mailbox/msg_[0-9a-z]+$"))
        # The HTML part, as the recipient sees it; its Approve link leaves the sandboxed frame for the window.
        await page.frame_locator("iframe.mail-html").get_by_role("link", name="Approve").click()
        await expect(page).to_have_url(re.compile(r"/review/link/[A-Za-z0-9_-]+$"))
        await expect(page.get_by_role("heading", name="Approve “Write the note”?")).to_be_visible()
        assert await status_of(db, execution_id) == "awaiting_review"  # the GET decided nothing
        await page.get_by_label("Comment (optional)").fill("ship it")
        await page.get_by_role("button", name="Approve").click()
        await expect(page.get_by_role("heading", name="Approved")).to_be_visible()
        await expect(page.get_by_text(f"by {REVIEWER} via email")).to_be_visible()

        async def completed() -> bool | None:
            return True if await status_of(db, execution_id) == "completed" else None

        await until(completed, timeout=20)
        async with db.reading() as session:
            (decision,) = await session.scalars(sa.select(Decision).where(Decision.execution_id == execution_id))
        assert (decision.via, decision.decided_by, decision.comment, decision.remote_addr) == (
            "email",
            REVIEWER,
            "ship it",
            "127.0.0.1",
        )
        assert problems == []
        await context.close()


async def test_the_mail_chat_link_gives_its_reviewer_the_buttons(
    settings: Settings, db: Database, chromium: Browser
) -> None:
    port = free_port()
    web = settings.with_changes(base_url=f"http://127.0.0.1:{port}", smtp_url=None, worker_poll_seconds=0.5)
    owner = await make_account(db, settings, "chatlink-owner@example.com")
    with live_server(web, run_worker=True, port=port) as base:
        async with httpx.AsyncClient(
            timeout=HTTP_TIMEOUT, base_url=base, headers={"Authorization": f"Bearer {owner.key}"}
        ) as api:
            created = await api.post(
                "/api/eval/create-task-agent",
                json={
                    "taskName": "Chat link",
                    "taskDescription": 'Write a note called "a.md" saying "hi". Then summarise.',
                    "assignedReviewer": REVIEWER,
                    "checkpoints": [{"stage": "Write it", "verificationQuestion": "Write a.md?"}],
                },
            )
        execution_id = created.json()["executionId"]

        async def mailed() -> str | None:
            async with db.reading() as session:
                body = await session.scalar(
                    sa.select(MailMessage.text_body).where(
                        MailMessage.execution_id == execution_id, MailMessage.message_key.like("review:%")
                    )
                )
            return body

        body = await until(mailed, timeout=20)
        chat_link = re.search(r"Live chat: (\S+)", body)
        assert chat_link is not None and "&rt=" in chat_link.group(1)
        # A fresh browser, not signed in: the mail's chat link alone makes it the reviewer here.
        context = await chromium.new_context()
        page = await context.new_page()
        problems: list[str] = []
        page.on("pageerror", lambda error: problems.append(str(error)))
        await page.goto(chat_link.group(1))
        await page.wait_for_selector("#chat[data-joined=true]", state="attached")
        await page.locator("form.cp-form button[value=approve]").click()
        await page.wait_for_selector(".checkpoint.state-approved")

        async def completed() -> bool | None:
            return True if await status_of(db, execution_id) == "completed" else None

        await until(completed, timeout=20)
        async with db.reading() as session:
            (decision,) = await session.scalars(sa.select(Decision).where(Decision.execution_id == execution_id))
        assert (decision.via, decision.decided_by) == ("chat", REVIEWER)
        assert problems == []
        await context.close()
