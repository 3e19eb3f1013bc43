"""Mail transport: an outbox table, delivered over SMTP or kept in the dev mailbox.

Sending is recorded in the caller's transaction (`enqueue_mail`), keyed by an intent key,
so a resumed agent or a retried request never sends the same message twice. With no SMTP
server configured the row stays in the dev mailbox, readable in the web interface.
"""

from __future__ import annotations

import asyncio
import logging
import random
import re
from dataclasses import dataclass
from datetime import datetime, timedelta
from email.message import EmailMessage
from email.utils import formatdate, parseaddr
from typing import Any
from urllib.parse import unquote, urlsplit

import aiosmtplib
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncSession

from core.db import Database, publish_after_commit
from core.event_payloads import MailFailed
from core.events import append_events
from core.headers import line_break_problem, one_recipient
from core.ids import new_id
from core.looks import NOW, Looks
from core.models import MailMessage, utcnow
from core.vocabulary import EventType
from core.wakeups import Wakeups

log = logging.getLogger(__name__)

MAIL_CHANNEL = "vouch:mail"
MAX_ATTEMPTS = 8
_SEND_LEASE = timedelta(minutes=2)
# The reply token a review mail carries in its subject (review/notify.py).
REPLY_TAG = re.compile(r"\[vouch:([0-9a-f]{8,64})\]")
# What a message keeps once it has left (sent, or given up on): its envelope, not its content. Review and sign-in
# mail carry single-use tokens that the database otherwise holds only as digests (review/links.py); a copy of the
# body would undo that for as long as the row lives.
NOT_KEPT = "Vouch keeps no copy of a message's content once it has left the outbox: it held single-use links.\n"


def without_content(message: MailMessage) -> dict[str, str | None]:
    """The values that drop a message's content: its bodies and the reply token in its subject."""
    return {"subject": without_reply_token(message.subject), "text_body": NOT_KEPT, "html_body": None}


def without_reply_token(subject: str) -> str:
    return REPLY_TAG.sub("", subject).rstrip()


@dataclass(frozen=True)
class SmtpTarget:
    host: str
    port: int
    use_tls: bool
    username: str | None
    password: str | None

    @classmethod
    def from_url(cls, url: str) -> SmtpTarget:
        parts = urlsplit(url)
        if parts.scheme not in ("smtp", "smtps") or not parts.hostname:
            raise ValueError("VOUCH_SMTP_URL must look like smtp://[user:pass@]host:port or smtps://…")
        return cls(
            host=parts.hostname,
            port=parts.port or (465 if parts.scheme == "smtps" else 25),
            use_tls=parts.scheme == "smtps",
            username=unquote(parts.username) if parts.username else None,
            password=unquote(parts.password) if parts.password else None,
        )


async def enqueue_mail(
    session: AsyncSession,
    *,
    message_key: str,
    sender: str,
    recipient: str,
    subject: str,
    text_body: str,
    html_body: str | None = None,
    execution_id: str | None = None,
    smtp_configured: bool,
) -> MailMessage:
    """Record a message to send; the same `message_key` always yields the one same message."""
    existing = await session.scalar(sa.select(MailMessage).where(MailMessage.message_key == message_key))
    if existing is not None:
        return existing
    message = MailMessage(
        id=new_id("msg"),
        message_key=message_key,
        execution_id=execution_id,
        sender=sender,
        recipient=recipient,
        subject=subject,
        text_body=text_body,
        html_body=html_body,
        status="queued" if smtp_configured else "dev_mailbox",
        next_attempt_at=utcnow() if smtp_configured else None,
        attempts=0,
        created_at=utcnow(),
    )
    session.add(message)
    if smtp_configured:
        publish_after_commit(session, MAIL_CHANNEL, {"id": message.id})
    return message


class Unsendable(Exception):
    """The message can never go out as it is (a header that is not one line, not exactly one recipient, a
    permanent refusal): it is marked failed at once, with this as its reason."""


def to_email(message: MailMessage) -> EmailMessage:
    """The message as it is sent; Unsendable when its row cannot make one (rows written before the header
    rules of core/headers.py, or by a bug)."""
    recipient = envelope_recipient(message)
    problem = line_break_problem(message.subject)
    if problem is not None:
        raise Unsendable(f"the subject {problem}")
    email = EmailMessage()
    try:
        email["From"] = message.sender
        email["To"] = recipient
        email["Subject"] = message.subject
        email["Date"] = formatdate(localtime=False)
        # Stable per message row: a re-send after a crash is recognisably the same message.
        # (make_msgid adds time and randomness, so it cannot serve here.)
        email["Message-ID"] = f"<{message.id}@vouch.local>"
        reply_token = REPLY_TAG.search(message.subject)
        if reply_token:
            # A review mail: replies go to review+<token>@<our domain>, which the inbound listener reads.
            domain = parseaddr(message.sender)[1].rpartition("@")[2] or "localhost"
            email["Reply-To"] = f"review+{reply_token.group(1)}@{domain}"
        email.set_content(message.text_body)
        if message.html_body:
            email.add_alternative(message.html_body, subtype="html")
    except (ValueError, TypeError, LookupError) as exc:
        raise Unsendable(f"the message cannot be built: {exc}") from None
    return email


def envelope_recipient(message: MailMessage) -> str:
    """The one address the row is for. Never a list: `a@x, b@y` in one row would reach both."""
    try:
        return one_recipient(message.recipient, globally_deliverable=False)
    except ValueError as exc:
        raise Unsendable(str(exc)) from None


def _due(now: datetime | sa.BindParameter[Any]) -> sa.Select[str]:
    """The ids of the queued messages whose attempt is due at `now` (a claim moves it on by `_SEND_LEASE`)."""
    return sa.select(MailMessage.id).where(MailMessage.status == "queued", MailMessage.next_attempt_at <= now)


async def _claim_due(db: Database) -> MailMessage | None:
    now = utcnow()
    async with db.transaction() as session:
        due = _due(now).order_by(MailMessage.next_attempt_at).limit(1)
        return await session.scalar(
            sa.update(MailMessage)
            .where(MailMessage.id == db.backend.skip_locked(due).scalar_subquery())
            .values(attempts=MailMessage.attempts + 1, next_attempt_at=now + _SEND_LEASE)
            .returning(MailMessage),
            execution_options={"synchronize_session": False},
        )


async def deliver_due_mail(db: Database, target: SmtpTarget) -> int:
    """Send every message that is due; returns how many were sent. Each message is sent or recorded as
    failed on its own: one that cannot be sent never stops the round or holds up the others."""
    sent = 0
    while (message := await _claim_due(db)) is not None:
        try:
            await _send_one(message, target)
        except Unsendable as exc:
            await _record_failure(db, message, str(exc), permanent=True)
            continue
        except (aiosmtplib.SMTPException, OSError) as exc:
            await _record_failure(db, message, _smtp_reason(exc), permanent=_refused_for_good(exc))
            continue
        except Exception as exc:
            # A bug, not the message's fault: retried on the schedule like a network error, and seen in the log.
            log.exception("mail %s: sending failed unexpectedly", message.id)
            await _record_failure(db, message, f"{type(exc).__name__}: {exc}", permanent=False)
            continue
        async with db.transaction() as session:
            await session.execute(
                sa.update(MailMessage)
                .where(MailMessage.id == message.id)
                .values(
                    status="sent", sent_at=utcnow(), last_error=None, next_attempt_at=None, **without_content(message)
                )
            )
        sent += 1
    return sent


async def _send_one(message: MailMessage, target: SmtpTarget) -> None:
    email = to_email(message)
    await aiosmtplib.send(
        email,
        # Named, not read from the headers: the row's one recipient is the only one.
        recipients=[envelope_recipient(message)],
        hostname=target.host,
        port=target.port,
        use_tls=target.use_tls,
        username=target.username,
        password=target.password,
        timeout=30,
    )


def _refused_for_good(exc: Exception) -> bool:
    """A 5xx about this message (its recipient, its content): trying again gets the same answer. Refusals
    that are about the server or our account (sender, authentication) are retried, as the operator may fix
    them in the meantime."""
    if isinstance(exc, aiosmtplib.SMTPRecipientsRefused):
        return bool(exc.recipients) and all(500 <= refusal.code < 600 for refusal in exc.recipients)
    if isinstance(exc, aiosmtplib.SMTPRecipientRefused | aiosmtplib.SMTPDataError):
        return 500 <= exc.code < 600
    return False


def _smtp_reason(exc: Exception) -> str:
    if isinstance(exc, aiosmtplib.SMTPRecipientsRefused):
        return "; ".join(f"{r.recipient} refused: {r.code} {r.message}" for r in exc.recipients) or str(exc)
    if isinstance(exc, aiosmtplib.SMTPResponseException):
        return f"{type(exc).__name__}: {exc.code} {exc.message}"
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


async def _record_failure(db: Database, message: MailMessage, reason: str, *, permanent: bool) -> None:
    give_up = permanent or message.attempts >= MAX_ATTEMPTS
    delay = min(3600.0, 5 * 3 ** (message.attempts - 1)) * random.uniform(0.8, 1.2)
    log.warning(
        "mail %s to %r failed (attempt %d%s): %s",
        message.id,
        message.recipient,
        message.attempts,
        ", giving up" if give_up else "",
        reason,
    )
    async with db.transaction() as session:
        await session.execute(
            sa.update(MailMessage)
            .where(MailMessage.id == message.id)
            .values(
                status="failed" if give_up else "queued",
                last_error=reason[:1000],
                next_attempt_at=None if give_up else utcnow() + timedelta(seconds=delay),
                **(without_content(message) if give_up else {}),
            )
        )
        if give_up and message.execution_id is not None:
            payload: MailFailed = {
                "messageId": message.id,
                "to": message.recipient,
                "subject": without_reply_token(message.subject),
                "reason": reason[:1000],
                "attempts": message.attempts,
            }
            # append_events, not append_event: the execution may have been deleted since the claim (no event then).
            await append_events(session, message.execution_id, [(EventType.MAIL_FAILED, payload)])


async def run_mail_dispatcher(db: Database, smtp_url: str, looks: Looks, stop: asyncio.Event) -> None:
    """Deliver queued mail until `stop` is set: woken by the bus, with the beat's look (core/looks.py) as safety net
    (and as all there is while Redis is away: core/wakeups.py)."""
    target = SmtpTarget.from_url(smtp_url)
    wakeups = Wakeups(db.bus, (MAIL_CHANNEL,), "the mail dispatcher")
    looks.add("mail", _due(NOW), wakeups.wake)
    try:
        while not stop.is_set():
            try:
                await deliver_due_mail(db, target)
            except Exception:
                log.exception("mail dispatch round failed")
            await wakeups.wait()
    finally:
        await wakeups.stop()
