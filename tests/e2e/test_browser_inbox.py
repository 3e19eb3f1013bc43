"""A real browser against a real server with its worker: reject from the review inbox with a comment, the
offline agent revises and comes back to the same checkpoint, approve the second attempt, the run completes."""

from __future__ import annotations

import httpx
import sqlalchemy as sa
from playwright.async_api import Browser, Page, expect

from core.accounts import create_user
from core.db import Database
from core.models import Checkpoint, Execution
from core.settings import Settings
from tests.conftest import make_account
from tests.e2e.test_browser_keys import chromium  # noqa: F401  (the fixture)
from tests.support.live import live_server
from tests.support.waiting import until

REVIEWER = "inbox-reviewer@example.com"
PASSWORD = "correct horse battery"
COMMENT = 'Add "Best regards" — and mind the «tone».'
TASK = {
    "taskName": "Report to the boss",
    "taskDescription": 'Write a note named "draft.md" saying "draft". '
    'Send an email to boss@example.com with subject "Report" and body "See the draft".',
    "checkpoints": [{"stage": "Before sending", "verificationQuestion": "OK to send the email?"}],
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


async def test_reject_in_the_inbox_then_approve_the_revision(
    settings: Settings,
    db: Database,
    chromium: Browser,  # noqa: F811
) -> None:
    owner = await make_account(db, settings, "owner@example.com")
    async with db.transaction() as session:
        await create_user(session, REVIEWER, PASSWORD)
    with live_server(settings, run_worker=True) as base:
        async with httpx.AsyncClient(base_url=base, headers={"Authorization": f"Bearer {owner.key}"}) as api:
            created = await api.post("/api/eval/create-task-agent", json=TASK)
            assert created.status_code == 201, created.text
            execution_id = created.json()["executionId"]

            async def waiting_at(attempt: int) -> str | None:
                checkpoint_id, status, at, _ = await checkpoint_state(db, execution_id)
                return checkpoint_id if (status, at) == ("awaiting_review", attempt) else None

            checkpoint_id = await until(lambda: waiting_at(1))

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
            await expect(page.get_by_text("OK to send the email?")).to_be_visible()
            # A rejection without a comment is refused on the page, and nothing is decided.
            await page.get_by_role("button", name="Reject").click()
            await expect(page.get_by_role("alert")).to_contain_text("needs a comment")
            await page.get_by_label("Comment").fill(COMMENT)
            await page.get_by_role("button", name="Reject").click()
            await expect(page).to_have_url(f"{base}/review/inbox?done={checkpoint_id}")
            await expect(page.get_by_text("Your decision is recorded.")).to_be_visible()

            # The agent revises and asks again at the same checkpoint: attempt 2.
            assert await until(lambda: waiting_at(2)) == checkpoint_id
            await page.goto("/review/inbox")
            await page.locator("tr.waiting").get_by_role("link", name="Report to the boss").click()
            await expect(page.locator(".card").first).to_contain_text("Attempt 2")
            await expect(page.locator("ol.context")).to_contain_text(
                f"Revising after the reviewer's comment: {COMMENT}"
            )
            await expect(page.locator("ol.attempts")).to_contain_text(f"Attempt 1: reject by {REVIEWER} via web")
            await page.get_by_role("button", name="Approve").click()
            await expect(page).to_have_url(f"{base}/review/inbox?done={checkpoint_id}")

            async def completed() -> dict[str, object] | None:
                record = (await api.get(f"/api/eval/status/{execution_id}")).json()
                return record if record["status"] in ("completed", "failed", "rejected") else None

            record = await until(completed)
            assert record["status"] == "completed"
            (cp,) = record["checkpoints"]  # type: ignore[misc]
            assert [(a["attempt"], a["decision"], a["via"]) for a in cp["attempts"]] == [
                (1, "reject", "web"),
                (2, "approve", "web"),
            ]
            assert cp["attempts"][0]["comment"] == COMMENT
            assert cp["attempts"][0]["remoteAddr"] == "127.0.0.1"
            # The reject-without-comment answer (422) is the only non-2xx the page may log.
            assert [p for p in problems if "422" not in p] == []
            await context.close()
