"""The review mail and its links: queued once per attempt when a checkpoint starts waiting; GET shows a
confirmation page and changes nothing; the POST (with its CSRF token) decides; a used, decided or expired
link is refused with a page saying what happened."""

from __future__ import annotations

import re
from datetime import timedelta

import sqlalchemy as sa

from chat.access import access_to
from core.models import Checkpoint, Execution, ReviewLink, utcnow
from review.notify import checkpoint_awaiting
from tests.conftest import Service
from tests.review.mail_support import (
    REPLY_TAG,
    REVIEWER,
    chat_link_in,
    checkpoint_row,
    decisions,
    links_in,
    paused_run,
    review_mail,
)
from tests.web.browser import Browser


async def test_review_mail_is_queued_once_with_everything_the_reviewer_needs(service: Service) -> None:
    run = await paused_run(service)
    mail = await review_mail(service, run.execution_id)
    assert mail.recipient == REVIEWER and mail.status == "dev_mailbox"
    assert mail.message_key == f"review:{run.checkpoint_id}:1:{REVIEWER}"
    # No VOUCH_INBOUND_SMTP here: nobody reads replies, so the subject carries no reply token (test_review_mail_html).
    assert not REPLY_TAG.search(mail.subject)
    for body in (mail.text_body, mail.html_body or ""):
        assert "Draft note" in body and "Write it?" in body and "The plan is written" in body
        assert "plan.md" in body  # what the agent is about to do
        assert f"https://vouch.test/chat/{run.execution_id}?token=" in body
        assert chat_link_in(body)[1] not in mail.text_body.replace(chat_link_in(mail.text_body)[1], "", 1)
        assert set(links_in(body)) == {"approve", "reject"}
    assert links_in(mail.text_body) == links_in(mail.html_body or "")
    async with service.db.reading() as session:
        stored = list(await session.scalars(sa.select(ReviewLink).where(ReviewLink.checkpoint_id == run.checkpoint_id)))
    assert sorted(link.purpose for link in stored) == ["approve", "chat", "reject", "reply"]
    for link in stored:
        # Only digests are kept: no token from the mail appears in the table.
        assert link.token_digest not in mail.text_body and link.attempt == 1 and link.reviewer_email == REVIEWER
        assert timedelta(hours=71) < link.expires_at - link.created_at <= timedelta(hours=72)


async def test_get_changes_nothing_and_the_post_decides_once(service: Service) -> None:
    run = await paused_run(service)
    links = links_in((await review_mail(service, run.execution_id)).text_body)
    browser = Browser(service.app, addr="203.0.113.9")
    for path in (links["approve"], links["reject"], links["approve"]):
        page = await browser.get(path)
        assert page.status == 200 and "Draft note" in page.text
        assert page.headers["Referrer-Policy"] == "no-referrer" and page.headers["Cache-Control"] == "no-store"
    assert (await checkpoint_row(service, run.checkpoint_id)).status == "awaiting_review"
    assert await decisions(service, run.checkpoint_id) == []

    page = await browser.get(links["approve"])
    done = await browser.post(links["approve"], {"csrf_token": page.csrf(), "comment": "looks right"})
    assert done.status == 200 and "Approved" in done.text and f"by {REVIEWER} via email" in done.text
    (decision,) = await decisions(service, run.checkpoint_id)
    assert (decision.decision, decision.decided_by, decision.via) == ("approve", REVIEWER, "email")
    assert (decision.comment, decision.remote_addr) == ("looks right", "203.0.113.9")

    again = await browser.post(links["approve"], {"csrf_token": page.csrf(), "comment": ""})
    assert again.status == 410 and "cannot decide again" in again.text and f"by {REVIEWER} via email" in again.text
    other = await browser.get(links["reject"])
    assert other.status == 410 and "Approved" in other.text and "/chat/" in other.text
    assert len(await decisions(service, run.checkpoint_id)) == 1


async def test_wrong_or_missing_csrf_is_refused(service: Service) -> None:
    run = await paused_run(service)
    links = links_in((await review_mail(service, run.execution_id)).text_body)
    browser = Browser(service.app)
    page = await browser.get(links["approve"])
    assert page.status == 200
    assert (await browser.post(links["approve"], {"csrf_token": "forged"})).status == 403
    assert (await browser.post(links["approve"], {})).status == 403
    # A token from another browser (another pre-session cookie) is no good here either.
    stranger = Browser(service.app)
    assert (await stranger.post(links["approve"], {"csrf_token": page.csrf()})).status == 403
    assert await decisions(service, run.checkpoint_id) == []
    assert (await checkpoint_row(service, run.checkpoint_id)).status == "awaiting_review"


async def test_reject_needs_a_comment(service: Service) -> None:
    run = await paused_run(service)
    links = links_in((await review_mail(service, run.execution_id)).text_body)
    browser = Browser(service.app)
    page = await browser.get(links["reject"])
    assert "required" in page.text
    empty = await browser.post(links["reject"], {"csrf_token": page.csrf(), "comment": "   "})
    assert empty.status == 422 and "Say why you reject" in empty.text
    assert await decisions(service, run.checkpoint_id) == []
    done = await browser.post(links["reject"], {"csrf_token": empty.csrf(), "comment": "use <b>v3</b>"})
    assert done.status == 200 and "Rejected" in done.text and "use &lt;b&gt;v3&lt;/b&gt;" in done.text
    (decision,) = await decisions(service, run.checkpoint_id)
    assert (decision.decision, decision.comment, decision.via) == ("reject", "use <b>v3</b>", "email")


async def test_expired_and_unknown_links_are_refused_with_a_page(service: Service) -> None:
    run = await paused_run(service)
    links = links_in((await review_mail(service, run.execution_id)).text_body)
    browser = Browser(service.app)
    page = await browser.get(links["approve"])
    async with service.db.transaction() as session:
        await session.execute(
            sa.update(ReviewLink)
            .where(ReviewLink.checkpoint_id == run.checkpoint_id)
            .values(expires_at=utcnow() - timedelta(seconds=1))
        )
    expired = await browser.get(links["approve"])
    assert expired.status == 410 and "has expired" in expired.text and "/chat/" in expired.text
    posted = await browser.post(links["approve"], {"csrf_token": page.csrf()})
    assert posted.status == 410 and "has expired" in posted.text
    assert await decisions(service, run.checkpoint_id) == []
    unknown = await browser.get("/review/link/not-a-real-token")
    assert unknown.status == 404 and "not valid" in unknown.text


async def test_a_second_notification_for_the_same_attempt_is_the_same_message(service: Service) -> None:
    run = await paused_run(service)
    first = await review_mail(service, run.execution_id)
    async with service.db.transaction() as session:
        checkpoint = await session.get_one(Checkpoint, run.checkpoint_id)
        again = await checkpoint_awaiting(session, service.settings, run.execution_id, checkpoint, None)
        assert again is not None and again.id == first.id
        count = await session.scalar(
            sa.select(sa.func.count()).select_from(ReviewLink).where(ReviewLink.checkpoint_id == run.checkpoint_id)
        )
    assert count == 4


async def test_the_mail_chat_link_lets_its_reviewer_decide_in_the_chat(service: Service) -> None:
    run = await paused_run(service)
    secret = service.settings.secret_key
    path, good = chat_link_in((await review_mail(service, run.execution_id)).text_body)
    async with service.db.reading() as session:
        granted = await access_to(session, run.execution_id, secret_key=secret, person=None, reviewer_token=good)
        assert granted is not None and granted.decider == REVIEWER and not granted.via_session
        forged = await access_to(session, run.execution_id, secret_key=secret, person=None, reviewer_token="x" + good)
        assert forged is None
    page = await Browser(service.app).get(path)
    assert page.status == 200 and f'data-reviewer-token="{good}"' in page.text
    # The same page without the reviewer token (a shared view link) hands none to the script.
    shared = await Browser(service.app).get(path.split("&rt=")[0])
    assert shared.status == 200 and 'data-reviewer-token=""' in shared.text
    # Another reviewer assigned since: the old mail's chat link speaks for no one.
    async with service.db.transaction() as session:
        await session.execute(
            sa.update(Execution).where(Execution.id == run.execution_id).values(assigned_reviewer="new@example.com")
        )
    async with service.db.reading() as session:
        stale = await access_to(session, run.execution_id, secret_key=secret, person=None, reviewer_token=good)
        assert stale is None


async def test_names_stored_before_they_had_to_be_one_line_still_make_a_one_line_subject(service: Service) -> None:
    # Issue 19: the API now refuses control characters in taskName and stage; rows from before may hold them.
    run = await paused_run(service)
    async with service.db.transaction() as session:
        execution = await session.get_one(Execution, run.execution_id)
        execution.task_name = "Report\r\nBcc: victim@example.com"
        execution.assigned_reviewer = "second@example.com"
        checkpoint = await session.get_one(Checkpoint, run.checkpoint_id)
        checkpoint.stage = "Draft\u2028note\t"
        await session.flush()
        mail = await checkpoint_awaiting(session, service.settings, run.execution_id, checkpoint, None)
    assert mail is not None
    assert mail.subject == "Review needed: Report Bcc: victim@example.com — Draft note", mail.subject
    assert not re.search(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]", mail.subject)
