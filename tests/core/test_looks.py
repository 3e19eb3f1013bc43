"""core/looks.py: at each beat one read asks which of a worker's loops has work due, and wakes only those."""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
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
    """Past its loops' first rounds, a worker with nothing to do sends the database only the beat's look."""
    worker = Worker(settings.with_changes(worker_poll_seconds=0.05), db, "idle-worker")
    stop = asyncio.Event()
    quiet = asyncio.Event()

    def look(statement: str) -> bool:
        return statement.startswith("SELECT EXISTS")

    with statements(db) as sent:

        def seen(*_args: Any) -> None:
            # However long the first rounds take (a loaded machine), five beats in a row with nothing but the look.
            if sum(map(look, sent)) >= 8 and all(map(look, sent[-5:])):
                quiet.set()

        event.listen(db.engine.sync_engine, "after_cursor_execute", seen)
        running = asyncio.create_task(worker.run(stop))
        try:
            async with asyncio.timeout(30):
                await quiet.wait()
        finally:
            event.remove(db.engine.sync_engine, "after_cursor_execute", seen)
            stop.set()
            await asyncio.wait_for(running, 15)
    # Each loop's own statements came once, in its first round: none of them again at a beat.
    rounds = Counter(s for s in sent if not look(s) and s != "BEGIN IMMEDIATE")
    assert rounds and max(rounds.values()) == 1, rounds
