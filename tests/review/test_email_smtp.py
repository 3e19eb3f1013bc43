"""Against real SMTP: the review mail goes out through the worker's dispatcher to an aiosmtpd server;
replies come in over SMTP (aiosmtplib) to the worker's inbound listener and decide, from the reviewer only."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from email import message_from_bytes, policy
from email.message import EmailMessage

import aiosmtplib
import pytest

from core.settings import Settings
from review.inbound import read_verdict
from tests.conftest import Service
from tests.review.mail_support import (
    REPLY_TAG,
    REVIEWER,
    Sink,
    chat_link_in,
    checkpoint_row,
    decisions,
    free_port,
    links_in,
    paused_run,
    review_mail,
    smtp_sink,
)
from tests.support.waiting import until
from tests.web.browser import Browser


@pytest.fixture
async def sink() -> AsyncIterator[tuple[Sink, int]]:
    with smtp_sink(asyncio.get_running_loop()) as found:
        yield found


@pytest.fixture
def inbound_port() -> int:
    return free_port()


@pytest.fixture
def settings(settings: Settings, sink: tuple[Sink, int], inbound_port: int) -> Iterator[Settings]:
    yield settings.with_changes(
        smtp_url=f"smtp://127.0.0.1:{sink[1]}",
        mail_from="Vouch <vouch@vouch.test>",
        inbound_smtp=f"127.0.0.1:{inbound_port}",
        worker_poll_seconds=0.2,
    )


async def received(sink: Sink) -> EmailMessage:
    await asyncio.wait_for(sink.arrived.wait(), 15)
    (envelope,) = sink.envelopes
    message = message_from_bytes(envelope.content, policy=policy.default)
    assert isinstance(message, EmailMessage)
    return message


def parts(message: EmailMessage) -> tuple[str, str]:
    text = message.get_body(preferencelist=("plain",))
    html = message.get_body(preferencelist=("html",))
    assert text is not None and html is not None
    return str(text.get_content()), str(html.get_content())


async def reply(port: int, *, envelope_from: str, header_from: str, to: str, subject: str, body: str) -> None:
    message = EmailMessage()
    message["From"], message["To"], message["Subject"] = header_from, to, subject
    message.set_content(body)
    # send() returns once the listener answered DATA, which it does after deciding: no waiting needed.
    await aiosmtplib.send(message, hostname="127.0.0.1", port=port, sender=envelope_from, recipients=[to])


async def test_mail_arrives_over_smtp_and_its_links_decide(service: Service, sink: tuple[Sink, int]) -> None:
    run = await paused_run(service)
    message = await received(sink[0])
    assert message["To"] == REVIEWER and message["From"] == "Vouch <vouch@vouch.test>"
    token = REPLY_TAG.search(str(message["Subject"]))
    assert token is not None and message["Reply-To"] == f"review+{token.group(1)}@vouch.test"
    text, html = parts(message)
    links = links_in(text)
    assert links == links_in(html)

    async def marked_sent() -> bool | None:
        # The server has the message before the dispatcher commits "sent": wait for that commit (bounded).
        return True if (await review_mail(service, run.execution_id)).status == "sent" else None

    await until(marked_sent, timeout=10)
    # Once sent, the outbox keeps none of the mail's tokens (the database holds their digests only), and the
    # links still decide.
    stored = await review_mail(service, run.execution_id)
    kept = " ".join((stored.subject, stored.text_body, stored.html_body or ""))
    tokens = [token.group(1), chat_link_in(text)[1], *(path.rsplit("/", 1)[1] for path in links.values())]
    assert not [t for t in tokens if t in kept], kept

    browser = Browser(service.app)
    for path in links.values():
        assert (await browser.get(path)).status == 200
    assert await decisions(service, run.checkpoint_id) == []
    page = await browser.get(links["approve"])
    assert (await browser.post(links["approve"], {"csrf_token": page.csrf()})).status == 200
    assert [d.via for d in await decisions(service, run.checkpoint_id)] == ["email"]
    assert (await browser.post(links["approve"], {"csrf_token": page.csrf()})).status == 410


async def test_reply_decides_only_from_the_reviewer(
    service: Service, sink: tuple[Sink, int], inbound_port: int
) -> None:
    run = await paused_run(service)
    message = await received(sink[0])
    subject = f"Re: {message['Subject']}"
    reply_to = str(message["Reply-To"])

    # Someone else, even with the token in both places: ignored.
    await reply(inbound_port, envelope_from="mallory@example.com", header_from="mallory@example.com",
                to=reply_to, subject=subject, body="approve")
    # The reviewer's address in the header but another envelope sender: ignored.
    await reply(inbound_port, envelope_from="mallory@example.com", header_from=REVIEWER,
                to=reply_to, subject=subject, body="approve")
    # The reviewer, but the first line is neither verdict: ignored.
    await reply(inbound_port, envelope_from=REVIEWER, header_from=REVIEWER,
                to=reply_to, subject=subject, body="Looks fine I think\napprove")
    # The reviewer without any token: ignored.
    await reply(inbound_port, envelope_from=REVIEWER, header_from=REVIEWER,
                to="someone@vouch.test", subject="Re: your mail", body="approve")
    assert await decisions(service, run.checkpoint_id) == []
    assert (await checkpoint_row(service, run.checkpoint_id)).status == "awaiting_review"

    # The reviewer, token only in the subject (sent to the plain sender address); the quote does not count.
    await reply(inbound_port, envelope_from=REVIEWER, header_from=f"Reviewer <{REVIEWER.upper()}>",
                to="vouch@vouch.test", subject=subject,
                body="\n> approve\n\nReject: the note must say v3\n\nOn Monday Vouch wrote:\n> ...")
    (decision,) = await decisions(service, run.checkpoint_id)
    assert (decision.decision, decision.comment, decision.via) == ("reject", "the note must say v3", "email")
    assert (decision.decided_by, decision.remote_addr) == (REVIEWER, "127.0.0.1")

    # A second reply for the same attempt changes nothing.
    await reply(inbound_port, envelope_from=REVIEWER, header_from=REVIEWER, to=reply_to, subject=subject,
                body="approve")
    assert [d.decision for d in await decisions(service, run.checkpoint_id)] == ["reject"]


def test_only_the_first_unquoted_line_counts() -> None:
    assert read_verdict("APPROVE\nreject: no") == read_verdict("approve")
    assert read_verdict("approve").verdict == "approve"  # type: ignore[union-attr]
    assert read_verdict("> reject: x\n\n  Approve.  ").verdict == "approve"  # type: ignore[union-attr]
    rejected = read_verdict("reject:   too risky  \n")
    assert rejected is not None and (rejected.verdict, rejected.comment) == ("reject", "too risky")
    for body in ("", "> approve", "reject:", "reject", "approved, thanks", "I approve", "ok"):
        assert read_verdict(body) is None, body
