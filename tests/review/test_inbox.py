"""The review inbox: only one's own checkpoints, oldest first; a CSRF-guarded form; reject needs a comment;
decisions recorded via web with the request's address; the backup reviewer only after escalation."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import timedelta

import pytest
import sqlalchemy as sa
from quart import Quart

from api.app import create_app
from core.db import Database
from core.models import Checkpoint, Decision, Execution, MailMessage
from core.settings import Settings
from review.timers import process_due_timers
from tests.agents.test_runner import BEFORE_SENDING, NOTE_THEN_MAIL, claim_and_run, new_execution
from tests.web.browser import Browser, signed_in_browser

ADDR = "198.51.100.23"


@pytest.fixture
async def app(settings: Settings) -> AsyncIterator[Quart]:
    app = create_app(settings, run_worker=False)
    async with app.test_app():
        yield app


def database(app: Quart) -> Database:
    found: Database = app.extensions["vouch"].db
    return found


async def paused(app: Quart, settings: Settings, reviewer: str, task_name: str, **fields: object) -> str:
    db = database(app)
    exe = await new_execution(
        db, settings, NOTE_THEN_MAIL, checkpoints=[BEFORE_SENDING], test_mode="with-verification", **fields
    )
    async with db.transaction() as session:
        await session.execute(
            sa.update(Execution).where(Execution.id == exe).values(assigned_reviewer=reviewer, task_name=task_name)
        )
    await claim_and_run(db, settings)
    async with db.reading() as session:
        checkpoint_id = await session.scalar(sa.select(Checkpoint.id).where(Checkpoint.execution_id == exe))
    assert checkpoint_id is not None
    return checkpoint_id


async def browser(app: Quart, settings: Settings, email: str) -> Browser:
    found, _ = await signed_in_browser(app, database(app), settings.secret_key, email)
    found.addr = ADDR
    return found


async def test_inbox_lists_only_own_waiting_checkpoints_oldest_first(app: Quart, settings: Settings) -> None:
    first = await paused(app, settings, "rita@example.com", "First task")
    await paused(app, settings, "someone@example.com", "Not hers")
    second = await paused(app, settings, "rita@example.com", "Second task")
    rita = await browser(app, settings, "rita@example.com")
    page = await rita.get("/review/inbox")
    assert page.status == 200
    assert page.headers["Cache-Control"] == "no-store"
    assert "Content-Security-Policy" in page.headers
    assert 'href="/review/inbox"' in page.text  # the nav links it
    assert "Not hers" not in page.text
    assert page.text.index(f"/review/inbox/{first}") < page.text.index(f"/review/inbox/{second}")
    assert page.text.count('class="waiting"') == 2

    other = await browser(app, settings, "mallory@example.com")
    assert (await other.get(f"/review/inbox/{first}")).status == 404
    denied = await other.post(f"/review/inbox/{first}", {"csrf_token": "x", "decision": "approve", "attempt": "1"})
    assert denied.status in (403, 404)
    signed_out = await Browser(app).get("/review/inbox")
    assert signed_out.status == 303 and signed_out.location == "/signin?next=%2Freview%2Finbox"


async def test_decide_from_the_inbox(app: Quart, settings: Settings) -> None:
    checkpoint_id = await paused(app, settings, "rita@example.com", "Weekly report")
    rita = await browser(app, settings, "rita@example.com")
    path = f"/review/inbox/{checkpoint_id}"
    page = await rita.get(path)
    assert page.status == 200
    assert "OK to send the email?" in page.text
    assert "Waiting for review at" in page.text  # the context: recent events

    no_token = await rita.post(path, {"decision": "approve", "attempt": "1"})
    assert no_token.status == 400
    bad_token = await rita.post(path, {"csrf_token": "forged", "decision": "approve", "attempt": "1"})
    assert bad_token.status == 403
    no_comment = await rita.submit(path, path, {"decision": "reject", "comment": "   ", "attempt": "1"})
    assert no_comment.status == 422
    assert "needs a comment" in no_comment.text
    async with database(app).reading() as session:
        assert list(await session.scalars(sa.select(Decision))) == []

    done = await rita.submit(path, path, {"decision": "reject", "comment": "Wrong recipient", "attempt": "1"})
    assert done.status == 303 and done.location == f"/review/inbox?done={checkpoint_id}"
    async with database(app).reading() as session:
        (row,) = await session.scalars(sa.select(Decision))
        checkpoint = await session.get_one(Checkpoint, checkpoint_id)
    assert (row.decision, row.via, row.decided_by, row.comment, row.remote_addr, row.attempt) == (
        "reject",
        "web",
        "rita@example.com",
        "Wrong recipient",
        ADDR,
        1,
    )
    # The offline agent cannot revise from the comment: its rejection ends the run (issue 20).
    assert (checkpoint.status, checkpoint.attempt) == ("rejected", 1)

    # The same form again (attempt 1) is refused, naming the winner; the history shows the decision.
    again = await rita.submit(path, path, {"decision": "approve", "attempt": "1"})
    assert again.status == 409
    assert "already rejected by rita@example.com via web" in again.text
    inbox = await rita.get("/review/inbox")
    assert "Nothing waits for your review." in inbox.text
    assert "Wrong recipient" in inbox.text and "Weekly report" in inbox.text


async def test_backup_reviewer_sees_and_decides_only_after_escalation(app: Quart, settings: Settings) -> None:
    checkpoint_id = await paused(app, settings, "rita@example.com", "Escalating", backupReviewer="bob@example.com")
    bob = await browser(app, settings, "bob@example.com")
    path = f"/review/inbox/{checkpoint_id}"
    assert "Nothing waits for your review." in (await bob.get("/review/inbox")).text
    page = await bob.get(path)
    assert page.status == 200 and 'name="decision"' not in page.text  # named on the task, but not yet asked

    async with database(app).reading() as session:
        since = await session.scalar(sa.select(Checkpoint.awaiting_since).where(Checkpoint.id == checkpoint_id))
    assert since is not None
    later = since + timedelta(minutes=settings.review_escalation_minutes + 1)
    assert await process_due_timers(database(app), settings, later) == 2  # reminder, then escalation
    assert f"/review/inbox/{checkpoint_id}" in (await bob.get("/review/inbox")).text
    done = await bob.submit(path, path, {"decision": "approve", "attempt": "1"})
    assert done.status == 303
    async with database(app).reading() as session:
        (row,) = await session.scalars(sa.select(Decision))
    assert (row.decided_by, row.via) == ("bob@example.com", "web")


OFFLINE_MAIL = 'Send an email to bob@example.com with subject "Draft" saying "Line one. Line two."'


async def test_the_inbox_shows_the_action_and_approves_it_edited(app: Quart, settings: Settings) -> None:
    db = database(app)
    exe = await new_execution(db, settings, OFFLINE_MAIL, test_mode="with-verification", autoDetectCheckpoints=True)
    async with db.transaction() as session:
        await session.execute(
            sa.update(Execution).where(Execution.id == exe).values(assigned_reviewer="rita@example.com")
        )
    await claim_and_run(db, settings)
    async with db.reading() as session:
        checkpoint_id = await session.scalar(sa.select(Checkpoint.id).where(Checkpoint.execution_id == exe))
    rita = await browser(app, settings, "rita@example.com")
    path = f"/review/inbox/{checkpoint_id}"
    page = await rita.get(path)
    assert "<code>send_email</code>" in page.text
    assert '<pre class="argument">Line one. Line two.</pre>' in page.text
    assert 'name="arg:subject"' in page.text and 'name="arg:to"' in page.text
    assert "This agent cannot read comments: a rejection ends the run; edit the action to change it." in page.text

    # The browser sends every field, line breaks as CRLF: only what changed is an edit.
    fields = {"arg:to": "bob@example.com", "arg:body": "Line one. Line two.", "attempt": "1", "decision": "approve"}
    bad = await rita.submit(path, path, {**fields, "arg:subject": "two\r\nlines"})
    assert bad.status == 422
    assert "Not recorded: subject must be a single line" in bad.text
    assert 'aria-invalid="true"' in bad.text and "two\r\nlines" not in bad.text  # kept as typed (LF)
    async with db.reading() as session:
        assert list(await session.scalars(sa.select(Decision))) == []

    done = await rita.submit(path, path, {**fields, "arg:subject": "Final <draft>"})
    assert done.status == 303
    async with db.reading() as session:
        (row,) = await session.scalars(sa.select(Decision))
    assert (row.via, row.edited_args) == ("web", {"subject": "Final <draft>"})
    assert row.original_args == {"to": "bob@example.com", "subject": "Draft", "body": "Line one. Line two."}
    await claim_and_run(db, settings, "worker-2")
    async with db.reading() as session:
        subject = await session.scalar(
            sa.select(MailMessage.subject).where(
                MailMessage.execution_id == exe, MailMessage.message_key.like("tool:%")
            )
        )
    assert subject == "Final <draft>"
