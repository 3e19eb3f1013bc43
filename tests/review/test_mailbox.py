"""The dev mailbox: with no SMTP server, a signed-in user reads the mail addressed to them, rendered
as the recipient would see it, and its links work."""

from __future__ import annotations

import asyncio
import html
import re

from core.mail import SmtpTarget, deliver_due_mail, enqueue_mail
from tests.conftest import Service
from tests.review.mail_support import (
    REVIEWER,
    decisions,
    execution_status,
    links_in,
    paused_run,
    review_mail,
    smtp_sink,
)
from tests.web.browser import Browser, signed_in_browser

SRCDOC = re.compile(r'srcdoc="([^"]*)"')


async def test_the_recipient_reads_the_review_mail_and_its_links_work(service: Service) -> None:
    run = await paused_run(service)
    mail = await review_mail(service, run.execution_id)
    reviewer, _ = await signed_in_browser(service.app, service.db, service.settings.secret_key, REVIEWER)

    listing = await reviewer.get("/mailbox")
    assert listing.status == 200 and f'href="/mailbox/{mail.id}"' in listing.text and "Draft note" in listing.text
    page = await reviewer.get(f"/mailbox/{mail.id}")
    assert page.status == 200
    assert page.headers["Referrer-Policy"] == "no-referrer" and "frame-ancestors 'none'" in page.headers[
        "Content-Security-Policy"
    ]
    # The HTML part: in a sandboxed frame without scripts, its links leaving through the top window.
    frame = re.search(r"<iframe[^>]*>", page.text)
    assert frame is not None and 'sandbox="allow-top-navigation-by-user-activation allow-popups"' in frame.group(0)
    srcdoc = SRCDOC.search(frame.group(0))
    assert srcdoc is not None
    shown = html.unescape(srcdoc.group(1))
    assert shown.startswith('<base target="_top">') and "<script" not in shown
    links = links_in(shown)
    assert links == links_in(mail.text_body)
    # The plain-text part, escaped as text.
    assert links["approve"] in page.text and "<pre" in page.text

    confirm = await reviewer.get(links["approve"])
    assert confirm.status == 200
    assert (await reviewer.post(links["approve"], {"csrf_token": confirm.csrf()})).status == 200
    (decision,) = await decisions(service, run.checkpoint_id)
    assert (decision.decision, decision.via, decision.decided_by) == ("approve", "email", REVIEWER)
    assert await execution_status(service, run.execution_id) in ("running", "completed")


async def test_a_message_that_has_left_shows_its_envelope_and_no_token(service: Service) -> None:
    link, reply = "https://vouch.example/review/link/s3cr3t-link", "0123456789abcdef"
    async with service.db.transaction() as session:
        message = await enqueue_mail(
            session,
            message_key="left:1",
            sender="Vouch <vouch@vouch.test>",
            recipient=REVIEWER,
            subject=f"Review needed: Note [vouch:{reply}]",
            text_body=f"Approve: {link}\n",
            html_body=f'<a href="{link}">Approve</a>',
            smtp_configured=True,
        )
    with smtp_sink(asyncio.get_running_loop()) as (sink, port):
        assert await deliver_due_mail(service.db, SmtpTarget.from_url(f"smtp://127.0.0.1:{port}")) == 1
    assert len(sink.envelopes) == 1
    reviewer, _ = await signed_in_browser(service.app, service.db, service.settings.secret_key, REVIEWER)
    page = await reviewer.get(f"/mailbox/{message.id}")
    assert page.status == 200
    assert "Review needed: Note" in page.text and "Sent by mail" in page.text
    assert "s3cr3t" not in page.text and reply not in page.text and "<iframe" not in page.text


async def test_others_see_neither_the_message_nor_its_listing(service: Service) -> None:
    run = await paused_run(service)
    mail = await review_mail(service, run.execution_id)
    other, _ = await signed_in_browser(service.app, service.db, service.settings.secret_key, "other@example.com")
    listing = await other.get("/mailbox")
    assert listing.status == 200 and mail.id not in listing.text and "No mail for you yet" in listing.text
    assert (await other.get(f"/mailbox/{mail.id}")).status == 404
    # Signed out: sent to sign in, and back afterwards.
    anonymous = await Browser(service.app).get(f"/mailbox/{mail.id}")
    assert anonymous.status == 303 and anonymous.location == f"/signin?next=%2Fmailbox%2F{mail.id}"


async def test_the_nav_and_home_page_lead_to_the_mailbox(service: Service) -> None:
    reviewer, _ = await signed_in_browser(service.app, service.db, service.settings.secret_key, REVIEWER)
    home = await reviewer.get("/")
    assert home.text.count('href="/mailbox"') == 2
