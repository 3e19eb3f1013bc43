"""Chaos: two worker processes share many executions while one of them is killed (-9) at random moments and
started again. Every execution completes, every mail and webhook reaches its receiver, every transcript's
seq is gapless, and nothing arrives twice unless a send lease ran out during the run (tests/e2e/repeats.py)."""

from __future__ import annotations

import asyncio
import json
import os
import random
import signal
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import ExitStack
from datetime import timedelta
from email.parser import BytesParser
from typing import Any

import pytest
import sqlalchemy as sa

from api.schemas import CreateTaskIn
from api.tasks import create_execution
from core.db import Database
from core.mail import _SEND_LEASE as MAIL_LEASE
from core.models import Event, Execution, MailMessage, ToolCall, WebhookDelivery
from core.settings import Settings
from tests.conftest import make_account
from tests.e2e.repeats import Repeats, Row
from tests.review.mail_support import Sink, smtp_sink
from tests.support.fake_llm import Answer, call, fake_llm
from tests.support.processes import VOUCH, running, vouch_env
from tests.support.waiting import until
from tests.support.webhook_receiver import Receiver, webhook_receiver

EXECUTIONS = 8
KILLS = 6
WEBHOOK_TIMEOUT = 5.0
# core/webhook_sender.deliver_due_webhooks: a claim holds for the attempt's time limit and a minute more.
WEBHOOK_LEASE = timedelta(seconds=WEBHOOK_TIMEOUT + 60)


def task(n: int) -> str:
    return (
        f'Send an email to first{n}@example.com with subject "One {n}" and body "first". '
        "Then wait 0.4 seconds. "
        f'Then send an email to second{n}@example.com with subject "Two {n}" and body "second". '
        f'Then write a note named "n{n}.md" saying "done".'
    )


def messages_at(sink: Sink) -> list[tuple[str, str, float]]:
    """(Message-ID, To, when) of every message the SMTP server accepted, resends included."""
    parsed = [(at, BytesParser().parsebytes(envelope.original_content)) for at, envelope in list(sink.arrivals)]
    return [(str(message["Message-ID"]), str(message["To"]), at) for at, message in parsed]


@pytest.fixture
async def inbox() -> AsyncIterator[tuple[Sink, int]]:
    with smtp_sink(asyncio.get_running_loop()) as (sink, port):
        yield sink, port


async def create_all(db: Database, settings: Settings, tasks: list[CreateTaskIn], model: str) -> list[str]:
    account = await make_account(db, settings, "chaos@example.com", "eval:manage")
    async with db.transaction() as session:
        return [(await create_execution(session, account.caller(), t, model)).id for t in tasks]


async def kill_at_random(
    settings: Settings, db: Database, env: dict[str, str], ids: list[str], kills: int,
    delivered: Callable[[], Awaitable[bool | None]],
) -> int:  # fmt: skip
    """Run two workers until every execution ends and `delivered()` says every mail and webhook reached its
    receiver (the workers send the outboxes, so they must live until then), killing one (-9) at a random
    moment up to `kills` times and starting it again; returns how many kills there were."""
    chance = random.Random(os.environ.get("VOUCH_CHAOS_SEED", "vouch"))
    killed = 0

    async def all_done() -> bool | None:
        async with db.reading() as session:
            statuses = (await session.execute(sa.select(Execution.status).where(Execution.id.in_(ids)))).scalars()
            return True if all(s in ("completed", "failed") for s in statuses) else None

    with ExitStack() as processes:
        workers = [
            processes.enter_context(running([VOUCH, "worker"], env, settings.data_dir / f"chaos-{name}.log"))
            for name in ("a", "b")
        ]
        while killed < kills and await all_done() is None:
            # A random moment (chaos timing, not synchronisation): inside a step, between steps, while mail
            # goes out, while a model answers or while a lease is renewed.
            await asyncio.sleep(chance.uniform(0.2, 1.0))
            victim = chance.randrange(len(workers))
            os.kill(workers[victim].pid, signal.SIGKILL)
            workers[victim].wait(timeout=10)
            killed += 1
            workers[victim] = processes.enter_context(
                running([VOUCH, "worker"], env, settings.data_dir / f"chaos-{killed}.log")
            )
        await until(all_done, timeout=90)
        # Usually seconds; but a message a killed worker had claimed, and not sent, goes out again only when
        # its send lease (2 minutes for mail, core/mail.py; WEBHOOK_LEASE for webhooks) runs out.
        await until(delivered, timeout=150)
    return killed


async def assert_gapless_and_completed(db: Database, ids: list[str]) -> None:
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


def worker_env(settings: Settings, smtp_port: int, **extra: str) -> dict[str, str]:
    return vouch_env(
        settings,
        VOUCH_SMTP_URL=f"smtp://127.0.0.1:{smtp_port}",
        VOUCH_WORKER_LEASE_SECONDS="1.5",
        VOUCH_WORKER_POLL_SECONDS="0.2",
        VOUCH_WORKER_CONCURRENCY="4",
        VOUCH_WEBHOOK_TIMEOUT_SECONDS=f"{WEBHOOK_TIMEOUT:g}",
        # The webhook receiver listens on loopback, allow-listed as an operator would an internal receiver.
        VOUCH_OUTBOUND_ALLOWLIST="127.0.0.1/32",
        **extra,
    )


async def assert_each_mail_once(db: Database, box: Sink, ids: list[str], expected: list[str], kills: int) -> None:
    received = messages_at(box)
    async with db.reading() as session:
        rows = (
            await session.execute(
                sa.select(
                    MailMessage.id,
                    MailMessage.recipient,
                    MailMessage.attempts,
                    MailMessage.status,
                    MailMessage.last_error,
                ).where(MailMessage.execution_id.in_(ids))
            )
        ).all()
    # The SMTP hop itself is at-least-once: only a kill between the server's 250 and our record of it can make
    # a dispatcher send a message again (with the same Message-ID, so receivers can drop it), and only once
    # that message's send lease has run out. A repeat sooner than that is two workers sending one claim.
    Repeats.of(
        "mail",
        MAIL_LEASE,
        kills,
        ((mid, at) for mid, _, at in received),
        (Row(f"<{row.id}@vouch.local>", row.recipient, row.attempts, row.last_error) for row in rows),
    ).assert_explained()
    # Each mail the agents sent is one row and one message (one Message-ID) at the server, and every one arrived.
    assert sorted(row.recipient for row in rows) == sorted(expected)
    assert {row.status for row in rows} == {"sent"}, rows
    assert {mid: to for mid, to, _ in received} == {f"<{row.id}@vouch.local>": row.recipient for row in rows}


async def assert_each_webhook_once(db: Database, receiver: Receiver, ids: list[str], kills: int) -> None:
    async with db.reading() as session:
        rows = (
            await session.execute(
                sa.select(
                    WebhookDelivery.id, WebhookDelivery.execution_id, WebhookDelivery.attempts, WebhookDelivery.status
                ).where(WebhookDelivery.execution_id.in_(ids))
            )
        ).all()
    # First what arrived twice (the likeliest regression, and the clearest failure message), then the rows.
    Repeats.of(
        "webhooks",
        WEBHOOK_LEASE,
        kills,
        ((r.webhook_id, r.at) for r in receiver.received),
        (Row(row.id, row.execution_id, row.attempts) for row in rows),
    ).assert_explained()
    # One completion per execution, each delivered: the same deliveries the receiver saw.
    assert sorted(row.execution_id for row in rows) == sorted(ids)
    assert {row.status for row in rows} == {"succeeded"}, rows
    assert {r.webhook_id for r in receiver.received} == {row.id for row in rows}


def mails_arrived(box: Sink, count: int) -> Callable[[], Awaitable[bool | None]]:
    async def arrived() -> bool | None:
        return True if len({mid for mid, _, _ in messages_at(box)}) >= count else None

    return arrived


def outboxes_done(db: Database, ids: list[str]) -> Callable[[], Awaitable[bool | None]]:
    """The rows say so too: a receiver's answer comes before the worker records it, and the workers stop next."""

    async def done() -> bool | None:
        async with db.reading() as session:
            open_mail = await session.scalar(
                sa.select(sa.func.count()).where(MailMessage.execution_id.in_(ids), MailMessage.status == "queued")
            )
            open_hooks = await session.scalar(
                sa.select(sa.func.count()).where(
                    WebhookDelivery.execution_id.in_(ids), WebhookDelivery.status == "pending"
                )
            )
        return True if open_mail == 0 and open_hooks == 0 else None

    return done


def all_arrived(*checks: Callable[[], Awaitable[bool | None]]) -> Callable[[], Awaitable[bool | None]]:
    async def arrived() -> bool | None:
        return True if all([await check() for check in checks]) else None

    return arrived


async def test_workers_killed_at_random_lose_nothing_and_repeat_nothing(
    settings: Settings, db: Database, inbox: tuple[Sink, int]
) -> None:
    box, port = inbox
    async with webhook_receiver([]) as receiver:
        tasks = [
            CreateTaskIn(
                taskName=f"chaos {n}", taskDescription=task(n), testMode="without-verification", webhookUrl=receiver.url
            )
            for n in range(EXECUTIONS)
        ]
        ids = await create_all(db, settings, tasks, "offline")

        async def webhooks_arrived() -> bool | None:
            return True if len({r.webhook_id for r in receiver.received}) >= EXECUTIONS else None

        delivered = all_arrived(mails_arrived(box, 2 * EXECUTIONS), webhooks_arrived, outboxes_done(db, ids))
        kills = await kill_at_random(settings, db, worker_env(settings, port), ids, KILLS, delivered)
    assert kills >= 1
    await assert_gapless_and_completed(db, ids)
    expected = [f"{which}{n}@example.com" for n in range(EXECUTIONS) for which in ("first", "second")]
    await assert_each_mail_once(db, box, ids, expected, kills)
    await assert_each_webhook_once(db, receiver, ids, kills)


def conversation_script(body: dict[str, Any]) -> Answer:
    """A model that mails the address in its task's name, writes a note, then finishes: decided from the
    conversation alone, so any worker may ask it at any point, as often as crashes make it."""
    task_name = next(m["content"] for m in body["messages"] if m["role"] == "user").rsplit(" ", 1)[1]
    done = [json.loads(m["content"]) for m in body["messages"] if m["role"] == "tool"]
    if not done:
        return call("send_email", to=task_name, subject="Result", body="All green.")
    if len(done) == 1:
        return call("write_file", path="note.md", content=f"mailed {done[0]['to']}")
    return call("finish", summary="mailed and noted")


async def test_model_agents_killed_at_random_resume_from_their_history_without_repeating(
    settings: Settings, db: Database, inbox: tuple[Sink, int]
) -> None:
    box, port = inbox
    addresses = [f"model{n}@example.com" for n in range(4)]
    async with fake_llm(then=conversation_script) as llm:
        tasks = [
            CreateTaskIn(taskName=f"mail {to}", taskDescription="Mail the result.", testMode="without-verification")
            for to in addresses
        ]
        ids = await create_all(db, settings, tasks, "openai:scripted")
        env = worker_env(settings, port, VOUCH_AGENT_BASE_URL=llm.base_url)
        delivered = all_arrived(mails_arrived(box, len(addresses)), outboxes_done(db, ids))
        kills = await kill_at_random(settings, db, env, ids, 4, delivered)
    await assert_gapless_and_completed(db, ids)
    await assert_each_mail_once(db, box, ids, addresses, kills)
    async with db.reading() as session:
        calls = (
            await session.execute(
                sa.select(ToolCall.execution_id, ToolCall.tool, ToolCall.status).where(ToolCall.execution_id.in_(ids))
            )
        ).all()
    # One call per tool per execution, each succeeded: no call was made twice, whatever the kills cut.
    assert sorted((tool, status) for _, tool, status in calls) == sorted(
        [("send_email", "succeeded"), ("write_file", "succeeded")] * len(ids)
    )
