"""core/looks.py: at each beat one read asks which of a worker's loops has work due, and wakes only those."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy import event

from agents.worker import Worker
from core.db import Database
from core.looks import NOW, Looks
from core.mail import _due as mail_due
from core.mail import enqueue_mail
from core.models import WebhookDelivery
from core.outbox_claims import due_rows
from core.settings import Settings


@contextmanager
def statements(db: Database) -> Iterator[list[str]]:
    """Every statement the database's engine sends while the block runs, in order, but SQLite's plain BEGIN: a read
    transaction, which takes no lock (a write begins IMMEDIATE, and is kept)."""
    sent: list[str] = []

    def before(_conn: Any, _cursor: Any, statement: str, *_args: Any) -> None:
        if statement != "BEGIN":
            sent.append(" ".join(statement.split()))

    event.listen(db.engine.sync_engine, "before_cursor_execute", before)
    try:
        yield sent
    finally:
        event.remove(db.engine.sync_engine, "before_cursor_execute", before)


async def queue_mail(db: Database) -> None:
    async with db.transaction() as session:
        await enqueue_mail(
            session,
            message_key="looks-test",
            sender="vouch@example.test",
            recipient="reviewer@example.test",
            subject="A review",
            text_body="Please look.",
            smtp_configured=True,
        )


async def test_one_read_wakes_only_the_looks_with_rows_due(db: Database) -> None:
    looks = Looks(db, 60.0)
    woken: list[str] = []
    looks.add("mail", mail_due(NOW), lambda: woken.append("mail"))
    looks.add("webhooks", due_rows(WebhookDelivery, NOW), lambda: woken.append("webhooks"))

    with statements(db) as sent:
        assert await looks.look() == []
    assert woken == []
    assert len(sent) == 1 and sent[0].startswith("SELECT EXISTS"), sent

    await queue_mail(db)
    with statements(db) as sent:
        assert await looks.look() == ["mail"]
    assert woken == ["mail"]
    assert len(sent) == 1 and sent[0].startswith("SELECT EXISTS"), sent  # a read: no write lock, no transaction


async def test_a_look_that_cannot_be_asked_wakes_every_loop(db: Database, caplog: pytest.LogCaptureFixture) -> None:
    looks = Looks(db, 60.0)
    woken: list[str] = []
    looks.add("mail", mail_due(NOW), lambda: woken.append("mail"))
    looks.add("broken", sa.select(sa.table("no_such_table", sa.column("id")).c.id), lambda: woken.append("broken"))
    with caplog.at_level(logging.ERROR, logger="core.looks"):
        assert await looks.look() == ["mail", "broken"]
    assert woken == ["mail", "broken"]
    assert "every loop looks for itself" in caplog.text


async def test_an_idle_worker_makes_one_read_a_beat(db: Database, settings: Settings) -> None:
    """Once its loops' first rounds are over, a worker with nothing to do sends the database only the beat's look."""
    worker = Worker(settings.with_changes(worker_poll_seconds=0.05), db, "idle-worker")
    stop = asyncio.Event()
    looked = asyncio.Event()
    with statements(db) as sent:

        def seen(*_args: Any) -> None:
            if sum(s.startswith("SELECT EXISTS") for s in sent) >= 8:
                looked.set()

        event.listen(db.engine.sync_engine, "after_cursor_execute", seen)
        running = asyncio.create_task(worker.run(stop))
        try:
            await asyncio.wait_for(looked.wait(), 30)
        finally:
            event.remove(db.engine.sync_engine, "after_cursor_execute", seen)
            stop.set()
            await asyncio.wait_for(running, 15)
    at = [i for i, s in enumerate(sent) if s.startswith("SELECT EXISTS")]
    # From the third beat (the first rounds, at start, take milliseconds) to the eighth: looks, one a beat.
    assert at[7] - at[2] == 5, sent[at[2] : at[7] + 1]
