"""Chaos: two worker processes share many executions while one of them is killed (-9) at random moments and
started again. Every execution completes, every mail reaches the SMTP server, and every transcript's seq
is gapless."""

from __future__ import annotations

import asyncio
import os
import random
import signal
import threading
from collections import Counter
from collections.abc import Iterator
from contextlib import ExitStack
from email.parser import BytesParser
from typing import Any

import pytest
import sqlalchemy as sa
from aiosmtpd.controller import Controller

from api.schemas import CreateTaskIn
from api.tasks import create_execution
from core.db import Database
from core.models import Event, Execution
from core.settings import Settings
from tests.conftest import make_account
from tests.support.ports import free_port
from tests.support.processes import VOUCH, running, vouch_env
from tests.support.waiting import until

EXECUTIONS = 8
KILLS = 6


def task(n: int) -> str:
    return (
        f'Send an email to first{n}@example.com with subject "One {n}" and body "first". '
        "Then wait 0.4 seconds. "
        f'Then send an email to second{n}@example.com with subject "Two {n}" and body "second". '
        f'Then write a note named "n{n}.md" saying "done".'
    )


class Inbox:
    def __init__(self) -> None:
        self.received: list[tuple[str, str]] = []  # (Message-ID, To)
        self.lock = threading.Lock()

    async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:
        message = BytesParser().parsebytes(envelope.original_content)
        with self.lock:
            self.received.append((str(message["Message-ID"]), str(message["To"])))
        return "250 OK"

    def snapshot(self) -> list[tuple[str, str]]:
        with self.lock:
            return list(self.received)


@pytest.fixture
def inbox() -> Iterator[tuple[Inbox, int]]:
    port = free_port()
    box = Inbox()
    controller = Controller(box, hostname="127.0.0.1", port=port)
    controller.start()
    try:
        yield box, port
    finally:
        controller.stop()


async def test_workers_killed_at_random_lose_nothing_and_repeat_nothing(
    settings: Settings, db: Database, inbox: tuple[Inbox, int]
) -> None:
    box, port = inbox
    account = await make_account(db, settings, "chaos@example.com", "eval:manage")
    ids = []
    async with db.transaction() as session:
        for n in range(EXECUTIONS):
            created = await create_execution(
                session,
                account.caller(),
                CreateTaskIn(taskName=f"chaos {n}", taskDescription=task(n), testMode="without-verification"),
                "offline",
            )
            ids.append(created.id)
    env = vouch_env(
        settings,
        VOUCH_SMTP_URL=f"smtp://127.0.0.1:{port}",
        VOUCH_WORKER_LEASE_SECONDS="1.5",
        VOUCH_WORKER_POLL_SECONDS="0.2",
        VOUCH_WORKER_CONCURRENCY="4",
    )
    chance = random.Random(os.environ.get("VOUCH_CHAOS_SEED", "vouch"))
    kills = 0

    async def all_done() -> bool | None:
        async with db.reading() as session:
            statuses = (await session.execute(sa.select(Execution.status).where(Execution.id.in_(ids)))).scalars()
            return True if all(s in ("completed", "failed") for s in statuses) else None

    with ExitStack() as processes:
        workers = [
            processes.enter_context(running([VOUCH, "worker"], env, settings.data_dir / f"chaos-{name}.log"))
            for name in ("a", "b")
        ]
        while kills < KILLS and await all_done() is None:
            # A random moment (chaos timing, not synchronisation): inside a step, between steps, while mail
            # goes out or while a lease is renewed.
            await asyncio.sleep(chance.uniform(0.2, 1.0))
            victim = chance.randrange(len(workers))
            os.kill(workers[victim].pid, signal.SIGKILL)
            workers[victim].wait(timeout=10)
            kills += 1
            workers[victim] = processes.enter_context(
                running([VOUCH, "worker"], env, settings.data_dir / f"chaos-{kills}.log")
            )
        await until(all_done, timeout=90)

        async def all_mail_arrived() -> bool | None:
            return True if len({mid for mid, _ in box.snapshot()}) >= 2 * EXECUTIONS else None

        await until(all_mail_arrived, timeout=30)

    assert kills >= 1
    async with db.reading() as session:
        rows = (await session.execute(sa.select(Execution.id, Execution.status).where(Execution.id.in_(ids)))).all()
        assert {status for _, status in rows} == {"completed"}
        for execution_id in ids:
            seqs = list(
                await session.scalars(
                    sa.select(Event.seq).where(Event.execution_id == execution_id).order_by(Event.seq)
                )
            )
            assert seqs == list(range(1, len(seqs) + 1)), execution_id
    received = box.snapshot()
    expected = sorted(f"{which}{n}@example.com" for n in range(EXECUTIONS) for which in ("first", "second"))
    by_id = {mid: to for mid, to in received}
    # Each mail the agents sent is one message (one Message-ID) at the server, and every one arrived.
    assert sorted(by_id.values()) == expected
    # The SMTP hop itself is at-least-once: only a kill between the server's 250 and our record of it can
    # make the dispatcher send a message again, with the same Message-ID, so receivers can drop it.
    resent = sum(count - 1 for count in Counter(mid for mid, _ in received).values())
    assert resent <= kills
