"""core.mail: the outbox (idempotent by message key), SMTP delivery and retries, SMTP URLs."""

from __future__ import annotations

import asyncio
import email
import email.policy
from collections.abc import Iterator
from datetime import timedelta
from email.message import EmailMessage
from typing import Any

import pytest
import sqlalchemy as sa
from aiosmtpd.controller import Controller

from core.db import Database
from core.mail import MAIL_CHANNEL, MAX_ATTEMPTS, NOT_KEPT, SmtpTarget, deliver_due_mail, enqueue_mail, to_email
from core.models import MailMessage, utcnow
from tests.support.ports import free_port


class Collector:
    def __init__(self) -> None:
        self.received: list[tuple[str, list[str], EmailMessage]] = []

    async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:
        parsed = email.message_from_bytes(envelope.original_content, policy=email.policy.default)
        assert isinstance(parsed, EmailMessage)
        self.received.append((envelope.mail_from, list(envelope.rcpt_tos), parsed))
        return "250 Message accepted for delivery"


@pytest.fixture
def smtp_server() -> Iterator[tuple[Collector, SmtpTarget]]:
    collector = Collector()
    port = free_port()
    controller = Controller(collector, hostname="127.0.0.1", port=port)
    controller.start()
    try:
        yield collector, SmtpTarget.from_url(f"smtp://127.0.0.1:{port}")
    finally:
        controller.stop()


async def enqueue(db: Database, key: str, *, smtp: bool = True, **fields: str) -> MailMessage:
    values = {
        "sender": "Vouch <vouch@example.com>",
        "recipient": "reviewer@example.com",
        "subject": "Please review",
        "text_body": "A checkpoint awaits you.\n",
        **fields,
    }
    async with db.transaction() as session:
        return await enqueue_mail(session, message_key=key, smtp_configured=smtp, **values)


async def row(db: Database, message_id: str) -> MailMessage:
    async with db.reading() as session:
        return await session.get_one(MailMessage, message_id)


async def count(db: Database) -> int:
    async with db.reading() as session:
        return int(await session.scalar(sa.select(sa.func.count()).select_from(MailMessage)) or 0)


async def test_same_message_key_is_one_message(db: Database) -> None:
    async with db.bus.subscribe(MAIL_CHANNEL) as wake:
        first = await enqueue(db, "intent:1")
        assert await wake.get(timeout=5) == {"id": first.id}
        again = await enqueue(db, "intent:1", subject="A different subject")
        assert await wake.get(timeout=0.05) is None, "a repeated intent is not news"
    assert again.id == first.id
    assert again.subject == "Please review"
    assert await count(db) == 1
    other = await enqueue(db, "intent:2")
    assert other.id != first.id
    assert await count(db) == 2


async def test_same_key_twice_in_one_transaction(db: Database) -> None:
    async with db.transaction() as session:
        kw: dict[str, Any] = {
            "sender": "a@example.com",
            "recipient": "b@example.com",
            "subject": "s",
            "text_body": "t",
            "smtp_configured": False,
        }
        one = await enqueue_mail(session, message_key="same", **kw)
        two = await enqueue_mail(session, message_key="same", **kw)
    assert one is two
    assert await count(db) == 1


async def test_without_smtp_mail_stays_in_the_dev_mailbox(db: Database) -> None:
    message = await enqueue(db, "dev:1", smtp=False)
    stored = await row(db, message.id)
    assert (stored.status, stored.next_attempt_at, stored.attempts) == ("dev_mailbox", None, 0)


async def test_smtp_delivery(db: Database, smtp_server: tuple[Collector, SmtpTarget]) -> None:
    collector, target = smtp_server
    message = await enqueue(db, "smtp:1", text_body="Hello reviewer,\nplease look.\n")
    dev_only = await enqueue(db, "smtp:dev", smtp=False)
    assert await deliver_due_mail(db, target) == 1

    ((mail_from, rcpt_tos, received),) = collector.received
    assert mail_from == "vouch@example.com"
    assert rcpt_tos == ["reviewer@example.com"]
    assert received["From"] == "Vouch <vouch@example.com>"
    assert received["To"] == "reviewer@example.com"
    assert received["Subject"] == "Please review"
    assert received["Message-ID"] == f"<{message.id}@vouch.local>"
    assert received["Date"]
    body = received.get_body(("plain",))
    assert body is not None
    assert body.get_content().replace("\r\n", "\n") == "Hello reviewer,\nplease look.\n"

    sent = await row(db, message.id)
    assert sent.status == "sent"
    assert sent.attempts == 1
    assert sent.sent_at is not None
    assert (sent.last_error, sent.next_attempt_at) == (None, None)
    assert (sent.recipient, sent.subject, sent.text_body, sent.html_body) == (
        "reviewer@example.com", "Please review", NOT_KEPT, None
    )
    dev = await row(db, dev_only.id)
    assert (dev.status, dev.text_body) == ("dev_mailbox", "A checkpoint awaits you.\n")
    # Nothing is due any more: a second round sends nothing.
    assert await deliver_due_mail(db, target) == 0
    assert len(collector.received) == 1


async def test_html_alternative_is_sent(db: Database, smtp_server: tuple[Collector, SmtpTarget]) -> None:
    collector, target = smtp_server
    await enqueue(db, "html:1", text_body="plain text\n", html_body="<p>rich text</p>\n")
    assert await deliver_due_mail(db, target) == 1
    ((_, _, received),) = collector.received
    assert received.get_content_type() == "multipart/alternative"
    html = received.get_body(("html",))
    plain = received.get_body(("plain",))
    assert html is not None and "<p>rich text</p>" in html.get_content()
    assert plain is not None and plain.get_content().replace("\r\n", "\n") == "plain text\n"


async def test_a_sent_message_keeps_its_envelope_not_its_tokens(
    db: Database, smtp_server: tuple[Collector, SmtpTarget]
) -> None:
    collector, target = smtp_server
    token, link = "0123456789abcdef0123", "https://vouch.example/review/link/s3cr3t-link-token"
    message = await enqueue(
        db, "tokens:1", subject=f"Review needed: Note — Draft [vouch:{token}]", text_body=f"Approve: {link}\n",
        html_body=f'<a href="{link}">Approve</a>',
    )
    assert await deliver_due_mail(db, target) == 1
    ((_, _, received),) = collector.received
    assert token in received["Subject"] and token in received["Reply-To"]
    plain = received.get_body(("plain",))
    assert plain is not None and link in plain.get_content()
    stored = await row(db, message.id)
    assert (stored.status, stored.subject, stored.text_body, stored.html_body) == (
        "sent", "Review needed: Note — Draft", NOT_KEPT, None
    )


async def test_concurrent_dispatchers_send_each_message_once(
    db: Database, smtp_server: tuple[Collector, SmtpTarget]
) -> None:
    collector, target = smtp_server
    for n in range(4):
        await enqueue(db, f"many:{n}", subject=f"message {n}")
    sent = await asyncio.gather(*(deliver_due_mail(db, target) for _ in range(3)))
    assert sum(sent) == 4
    assert sorted(str(m["Subject"]) for _, _, m in collector.received) == [f"message {n}" for n in range(4)]


async def test_unreachable_server_leaves_the_message_queued_for_a_retry(db: Database) -> None:
    target = SmtpTarget.from_url(f"smtp://127.0.0.1:{free_port()}")
    message = await enqueue(db, "down:1")
    assert await deliver_due_mail(db, target) == 0
    stored = await row(db, message.id)
    assert stored.status == "queued"
    assert stored.attempts == 1
    assert stored.last_error
    assert stored.sent_at is None
    assert stored.next_attempt_at is not None
    assert stored.next_attempt_at > utcnow() + timedelta(seconds=2), "retries back off"
    assert stored.text_body == "A checkpoint awaits you.\n", "a retry has its content to send"
    # Not due yet: another round does not hammer the server.
    assert await deliver_due_mail(db, target) == 0
    assert (await row(db, message.id)).attempts == 1


async def test_gives_up_after_the_last_attempt(db: Database) -> None:
    target = SmtpTarget.from_url(f"smtp://127.0.0.1:{free_port()}")
    message = await enqueue(db, "down:last")
    async with db.transaction() as session:
        await session.execute(
            sa.update(MailMessage).where(MailMessage.id == message.id).values(attempts=MAX_ATTEMPTS - 1)
        )
    assert await deliver_due_mail(db, target) == 0
    stored = await row(db, message.id)
    assert (stored.status, stored.attempts, stored.next_attempt_at) == ("failed", MAX_ATTEMPTS, None)
    assert stored.last_error
    assert (stored.text_body, stored.html_body) == (NOT_KEPT, None), "given up on, it keeps no content either"


def test_message_id_is_stable_per_message() -> None:
    message = MailMessage(
        id="msg_0123456789abcdefghjkmnpq",
        message_key="k",
        sender="a@example.com",
        recipient="b@example.com",
        subject="s",
        text_body="t",
        status="queued",
    )
    first, second = to_email(message), to_email(message)
    assert first["Message-ID"] == second["Message-ID"]
    assert message.id in first["Message-ID"]


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("smtp://mail.example.com", SmtpTarget("mail.example.com", 25, False, None, None)),
        ("smtp://mail.example.com:2525", SmtpTarget("mail.example.com", 2525, False, None, None)),
        ("smtps://mail.example.com", SmtpTarget("mail.example.com", 465, True, None, None)),
        ("smtps://mail.example.com:8465", SmtpTarget("mail.example.com", 8465, True, None, None)),
        (
            "smtp://user:secret@mail.example.com:587",
            SmtpTarget("mail.example.com", 587, False, "user", "secret"),
        ),
        (
            "smtps://me%40example.com:p%40ss%3Aw0rd@smtp.example.com",
            SmtpTarget("smtp.example.com", 465, True, "me@example.com", "p@ss:w0rd"),
        ),
    ],
)
def test_smtp_url_parsing(url: str, expected: SmtpTarget) -> None:
    assert SmtpTarget.from_url(url) == expected


@pytest.mark.parametrize("url", ["http://mail.example.com", "smtp://", "mail.example.com:25", ""])
def test_bad_smtp_urls_are_refused(url: str) -> None:
    with pytest.raises(ValueError, match="VOUCH_SMTP_URL"):
        SmtpTarget.from_url(url)
