"""A real browser against a real server with its worker: the review inbox shows the gated call in full, refuses a
rejection without a comment, and approves the call with an edited subject; the run sends the edited mail."""


from __future__ import annotations

from typing import Any

import httpx
import sqlalchemy as sa
from playwright.async_api import Browser, Page, expect

from core.accounts import create_user
from core.db import Database
from core.models import Checkpoint, Execution, MailMessage
from core.settings import Settings
from tests.conftest import make_account
from tests.e2e.test_browser_keys import chromium  # noqa: F401  (the fixture)
from tests.support.live import HTTP_TIMEOUT, at_own_address, live_server
from tests.support.waiting import until

REVIEWER = "inbox-reviewer@example.com"
PASSWORD = "correct horse battery"
EDITED = "Report — final «draft»"
TASK = {
    "taskName": "Report to the boss",
    "taskDescription": 'Write a note named "draft.md" saying "draft". '
    'Send an email to boss@example.com with subject "Report" and body "See the draft".',
    "autoDetectCheckpoints": True,
    "assignedReviewer": REVIEWER,
}


async def checkpoint_state(db: Database, execution_id: str) -> tuple[str, str, int, str]:
    async with db.reading() as session:
        row = (
            await session.execute(
                sa.select(Checkpoint.id, Checkpoint.status, Checkpoint.attempt, Execution.status)
                .join(Execution, Execution.id == Checkpoint.execution_id)
                .where(Checkpoint.execution_id == execution_id)
            )
        ).one()
        return row[0], row[1], row[2], row[3]


async def test_the_inbox_refuses_a_bare_rejection_and_approves_an_edited_subject(
    settings: Settings,
    db: Database,
    chromium: Browser,  # noqa: F811
) -> None:
    owner = await make_account(db, settings, "owner@example.com")
    async with db.transaction() as session:
        await create_user(session, REVIEWER, PASSWORD)
    own, port = at_own_address(settings)
    with live_server(own, run_worker=True, port=port) as base:
        async with httpx.AsyncClient(
            timeout=HTTP_TIMEOUT, base_url=base, headers={"Authorization": f"Bearer {owner.key}"}
        ) as api:
            created = await api.post("/api/eval/create-task-agent", json=TASK)
            assert created.status_code == 201, created.text
            execution_id = created.json()["executionId"]

            async def waiting() -> str | None:
                checkpoint_id, status, _, _ = await checkpoint_state(db, execution_id)
                return checkpoint_id if status == "awaiting_review" else None

            checkpoint_id = await until(waiting)

            context = await chromium.new_context(base_url=base)
            page: Page = await context.new_page()
            problems: list[str] = []
            page.on("console", lambda msg: problems.append(msg.text) if msg.type == "error" else None)
            page.on("pageerror", lambda error: problems.append(str(error)))

            await page.goto("/review/inbox")
            await expect(page).to_have_url(f"{base}/signin?next=%2Freview%2Finbox")
            await page.get_by_label("E-mail").fill(REVIEWER)
            await page.get_by_label("Password").fill(PASSWORD)
            await page.get_by_role("button", name="Sign in").click()
            await expect(page).to_have_url(f"{base}/review/inbox")

            await page.locator("tr.waiting").get_by_role("link", name="Report to the boss").click()
            await expect(page).to_have_url(f"{base}/review/inbox/{checkpoint_id}")
            # The call in full, and the offline agent's honest note.
            await expect(page.locator("section.action")).to_contain_text("send_email")
            await expect(page.locator("pre.argument")).to_have_text(["boss@example.com", "Report", "See the draft"])
            await expect(page.locator("p.note")).to_contain_text("This agent cannot read comments")
            # A rejection without a comment is refused on the page, and nothing is decided.
            await page.get_by_role("button", name="Reject").click()
            await expect(page.get_by_role("alert")).to_contain_text("needs a comment")

            await page.get_by_text("Edit the arguments before approving").click()
            await page.get_by_label("subject").fill("two\nlines")
            await page.get_by_role("button", name="Approve").click()
            await expect(page.get_by_role("alert")).to_contain_text("subject must be a single line")
            await page.get_by_label("subject").fill(EDITED)
            await page.get_by_role("button", name="Approve").click()
            await expect(page).to_have_url(f"{base}/review/inbox?done={checkpoint_id}")
            await expect(page.get_by_text("Your decision is recorded.")).to_be_visible()

            async def completed() -> dict[str, Any] | None:
                record = (await api.get(f"/api/eval/status/{execution_id}")).json()
                return record if record["status"] in ("completed", "failed", "rejected") else None

            record = await until(completed)
            assert record["status"] == "completed", record
            (cp,) = record["checkpoints"]
            assert [(a["attempt"], a["decision"], a["via"]) for a in cp["attempts"]] == [(1, "approve", "web")]
            assert cp["attempts"][0]["editedArgs"] == {"subject": EDITED}
            assert cp["attempts"][0]["originalArgs"]["subject"] == "Report"
            assert cp["attempts"][0]["remoteAddr"] == "127.0.0.1"
            async with db.reading() as session:
                subject = await session.scalar(
                    sa.select(MailMessage.subject).where(
                        MailMessage.execution_id == execution_id, MailMessage.message_key.like("tool:%")
                    )
                )
            assert subject == EDITED
            # The two refused forms' answers (422) are the only non-2xx the page may log.
            assert [p for p in problems if "422" not in p] == []
            await context.close()
