"""core.mail: one message that cannot be built or is refused for good fails on its own, with its reason, an
event on its execution, and never holds up the others (issue 19, item 4)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
import sqlalchemy as sa
from aiosmtpd.controller import Controller

from core.db import Database
from core.ids import new_id
from core.mail import MAX_ATTEMPTS, NOT_KEPT, SmtpTarget, deliver_due_mail
from core.models import Event, MailMessage, utcnow
from core.settings import Settings
from tests.conftest import make_account
from tests.core.test_mail import Collector, enqueue, row
from tests.core.webhook_support import new_execution
from tests.support.ports import free_port


class PickyServer(Collector):
    """Refuses recipients by their local part: `gone@…` for good (550), `busy@…` for now (451)."""

    async def handle_RCPT(self, server: Any, session: Any, envelope: Any, address: str, options: Any) -> str:
        local = address.partition("@")[0]
        if local == "gone":
            return "550 5.1.1 no such mailbox"
        if local == "busy":
            return "451 4.3.0 try again later"
        envelope.rcpt_tos.append(address)
        return "250 OK"


@pytest.fixture
def picky_server() -> Iterator[tuple[PickyServer, SmtpTarget]]:
    collector = PickyServer()
    port = free_port()
    controller = Controller(collector, hostname="127.0.0.1", port=port)
    controller.start()
    try:
        yield collector, SmtpTarget.from_url(f"smtp://127.0.0.1:{port}")
    finally:
        controller.stop()


async def poisoned(db: Database, execution_id: str | None = None, **fields: str) -> str:
    """A queued row written straight into the table, as an older version (or a bug) could have left it."""
    values: dict[str, Any] = {
        "sender": "Vouch <vouch@example.com>",
        "recipient": "reviewer@example.com",
        "subject": "Please review",
        "text_body": "A checkpoint awaits you.\n",
        **fields,
    }
    message_id = new_id("msg")
    async with db.transaction() as session:
        session.add(
            MailMessage(
                id=message_id,
                message_key=f"poison:{message_id}",
                execution_id=execution_id,
                status="queued",
                attempts=0,
                # Due before the good row: it is claimed first.
                next_attempt_at=utcnow() - timedelta(minutes=1),
                created_at=utcnow(),
                **values,
            )
        )
    return message_id


async def mail_events(db: Database, execution_id: str) -> list[dict[str, Any]]:
    async with db.reading() as session:
        rows = await session.scalars(
            sa.select(Event).where(Event.execution_id == execution_id, Event.type == "mail.failed").order_by(Event.seq)
        )
        return [event.payload for event in rows]


async def test_a_poisoned_row_fails_alone_and_the_good_one_goes_out_at_once(
    db: Database, settings: Settings, picky_server: tuple[PickyServer, SmtpTarget]
) -> None:
    collector, target = picky_server
    owner = await make_account(db, settings, "owner@example.com")
    execution_id = await new_execution(db, owner, None)
    bad = await poisoned(db, execution_id, subject="Review needed: x\r\nBcc: victim@example.com")
    good = await enqueue(db, "good:1", subject="Please review")

    began = time.monotonic()
    assert await deliver_due_mail(db, target) == 1  # the round does not raise
    assert time.monotonic() - began < 10

    ((_, rcpt_tos, received),) = collector.received
    assert rcpt_tos == ["reviewer@example.com"] and received["Subject"] == "Please review"
    assert (await row(db, good.id)).status == "sent"
    failed = await row(db, bad)
    assert (failed.status, failed.attempts, failed.next_attempt_at) == ("failed", 1, None)
    assert failed.last_error is not None and "subject" in failed.last_error
    [event] = await mail_events(db, execution_id)
    assert event["messageId"] == bad
    assert event["to"] == "reviewer@example.com"
    assert event["subject"] == "Review needed: x\r\nBcc: victim@example.com"
    assert event["reason"] == failed.last_error
    # Nothing is left due: the bad row is not tried again.
    assert await deliver_due_mail(db, target) == 0


@pytest.mark.parametrize(
    "recipient",
    ["a@example.com, b@example.com", '"a@example.com" <b@example.com>, c@example.com', "not an address", ""],
)
async def test_a_row_that_does_not_name_exactly_one_recipient_is_never_sent(
    db: Database, picky_server: tuple[PickyServer, SmtpTarget], recipient: str
) -> None:
    collector, target = picky_server
    bad = await poisoned(db, recipient=recipient)
    assert await deliver_due_mail(db, target) == 0
    assert collector.received == []
    failed = await row(db, bad)
    assert failed.status == "failed"
    assert failed.last_error is not None and "recipient" in failed.last_error


async def test_a_permanent_refusal_fails_at_once_and_a_temporary_one_backs_off(
    db: Database, picky_server: tuple[PickyServer, SmtpTarget]
) -> None:
    collector, target = picky_server
    gone = await enqueue(db, "gone:1", recipient="gone@example.com")
    busy = await enqueue(db, "busy:1", recipient="busy@example.com")
    fine = await enqueue(db, "fine:1", recipient="fine@example.com")
    assert await deliver_due_mail(db, target) == 1
    assert [rcpts for _, rcpts, _ in collector.received] == [["fine@example.com"]]
    assert (await row(db, fine.id)).status == "sent"

    refused = await row(db, gone.id)
    assert (refused.status, refused.attempts, refused.next_attempt_at) == ("failed", 1, None)
    assert refused.last_error is not None and "550" in refused.last_error
    assert (refused.text_body, refused.html_body) == (NOT_KEPT, None)

    later = await row(db, busy.id)
    assert (later.status, later.attempts) == ("queued", 1)
    assert later.last_error is not None and "451" in later.last_error
    assert later.next_attempt_at is not None and later.next_attempt_at > utcnow() + timedelta(seconds=2)
    assert later.text_body == "A checkpoint awaits you.\n"


async def test_a_temporary_refusal_gives_up_after_the_last_attempt(
    db: Database, picky_server: tuple[PickyServer, SmtpTarget]
) -> None:
    _, target = picky_server
    busy = await enqueue(db, "busy:last", recipient="busy@example.com")
    async with db.transaction() as session:
        await session.execute(sa.update(MailMessage).where(MailMessage.id == busy.id).values(attempts=MAX_ATTEMPTS - 1))
    assert await deliver_due_mail(db, target) == 0
    stored = await row(db, busy.id)
    assert (stored.status, stored.attempts, stored.next_attempt_at) == ("failed", MAX_ATTEMPTS, None)
    assert stored.last_error is not None and "451" in stored.last_error
