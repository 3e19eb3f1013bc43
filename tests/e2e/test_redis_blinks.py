"""Redis blinks: every long-running loop that waits on the bus keeps working after its connections are killed
(`CLIENT KILL`), and after a start while Redis is down.

Each process here names its connections (`?client_name=`), so a test kills only its own, never a parallel
test's. The worker's poll is made far longer than the test: only a bus subscribed again can wake it.
"""

from __future__ import annotations

import asyncio
import logging
import subprocess
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest
import redis.asyncio as aioredis
import sqlalchemy as sa
from redis.exceptions import RedisError

from agents.worker import Worker
from core.allowlist import parse_allowlist
from core.db import Database
from core.links import chat_view_token
from core.mail import enqueue_mail
from core.models import Execution
from core.redis_bus import RedisBus
from core.settings import Settings
from tests.chat.helpers import Watcher, append, new_execution
from tests.conftest import make_account
from tests.core.webhook_support import finish
from tests.core.webhook_support import new_execution as hooked_execution
from tests.review.mail_support import Sink, smtp_sink
from tests.support.live import live_server
from tests.support.ports import free_port
from tests.support.redis_clients import REDIS_URL, kill, named_url, subscribed
from tests.support.waiting import until
from tests.support.webhook_receiver import Receiver, webhook_receiver

# The worker's loops that subscribe: its wake-ups, the mail dispatcher, the webhook sender, the scorer and the
# suite scheduler.
WORKER_SUBSCRIPTIONS = 5
WORKER_LOOPS = ("the worker's wake-ups", "the mail dispatcher", "the webhook sender")
# Far longer than any wait below: what happens in time was woken by the bus.
SLOW_POLL = 600.0


async def _some(value: object) -> object | None:
    return value or None


@dataclass
class Outside:
    """What the test sees and does from outside the worker: a web process's Database, an SMTP sink, a receiver."""

    db: Database
    settings: Settings
    sink: Sink
    receiver: Receiver

    async def mail(self, key: str) -> None:
        async with self.db.transaction() as session:
            await enqueue_mail(
                session,
                message_key=key,
                sender="vouch@example.com",
                recipient="reviewer@example.com",
                subject=f"Mail {key}",
                text_body="Hello.\n",
                smtp_configured=True,
            )

    async def mailed(self, key: str, timeout: float) -> None:
        await until(
            lambda: _some(any(f"Mail {key}" in e.content.decode() for e in self.sink.envelopes)), timeout=timeout
        )

    async def webhook(self, timeout: float) -> None:
        """An execution finishes (in the web process): its completion webhook reaches the receiver."""
        owner = await make_account(self.db, self.settings, f"{key_of()}@example.com")
        execution_id = await hooked_execution(self.db, owner, self.receiver.url)
        before = len(self.receiver.received)
        await finish(self.db, execution_id)
        await until(lambda: self.receiver.count(before + 1), timeout=timeout)

    async def run_task(self, timeout: float) -> None:
        """A task is created (in the web process): the worker is woken, claims it and runs it to its end."""
        execution_id = await new_execution(self.db, self.settings, reviewer=None, checkpoints=0)

        async def done() -> str | None:
            async with self.db.reading() as session:
                status = await session.scalar(sa.select(Execution.status).where(Execution.id == execution_id))
            return status if status in ("completed", "failed") else None

        assert await until(done, timeout=timeout) == "completed"


def _said(caplog: pytest.LogCaptureFixture, start: str) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.getMessage().startswith(start)]


def key_of() -> str:
    from core.ids import new_id

    return new_id("k")


@asynccontextmanager
async def redis_server(port: int, data_dir: Path) -> AsyncIterator[aioredis.Redis]:
    """A Redis of this test's own on `port` (a client of it, once it answers), stopped after."""
    proc = subprocess.Popen(
        ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
         "--dir", str(data_dir)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    admin = aioredis.Redis.from_url(f"redis://127.0.0.1:{port}/0")

    async def answers() -> bool | None:
        assert proc.poll() is None, "redis-server exited"
        try:
            return bool(await admin.ping()) or None
        except (OSError, RedisError):
            return None

    try:
        await until(answers, timeout=15)
        yield admin
    finally:
        await admin.aclose()
        proc.terminate()
        proc.wait(timeout=15)


@asynccontextmanager
async def running(settings: Settings, redis_base: str = REDIS_URL) -> AsyncIterator[tuple[str, Outside]]:
    """A worker (poll: SLOW_POLL) beside a web process's Database, each on connections named its own; yields the
    worker's connection name and the outside view."""
    worker_url, worker_name = named_url("worker", redis_base)
    web_url, _ = named_url("web", redis_base)
    with smtp_sink(asyncio.get_running_loop()) as (sink, smtp_port):
        async with webhook_receiver([]) as receiver:
            worker_settings = settings.with_changes(
                redis_url=worker_url,
                smtp_url=f"smtp://127.0.0.1:{smtp_port}",
                worker_poll_seconds=SLOW_POLL,
                webhook_allowlist=parse_allowlist("127.0.0.1"),
                webhook_timeout_seconds=5.0,
            )
            worker_bus, web_bus = RedisBus(worker_url), RedisBus(web_url)
            worker_db = Database(settings.database_url, worker_bus)
            web_db = Database(settings.database_url, web_bus)
            stop = asyncio.Event()
            task = asyncio.create_task(Worker(worker_settings, worker_db).run(stop))
            try:
                yield worker_name, Outside(web_db, settings.with_changes(redis_url=web_url), sink, receiver)
                assert not task.done(), task
            finally:
                stop.set()
                await asyncio.wait_for(task, 30)
                for db, bus in ((worker_db, worker_bus), (web_db, web_bus)):
                    await db.dispose()
                    await bus.close()


async def _all_subscribed(admin: aioredis.Redis, name: str, *, except_ids: frozenset[str] = frozenset()) -> set[str]:
    async def check() -> set[str] | None:
        found = await subscribed(admin, name, except_ids=except_ids)
        return found if len(found) >= WORKER_SUBSCRIPTIONS else None

    return await until(check, timeout=20)


async def test_mail_webhooks_and_wake_ups_flow_again_after_the_workers_redis_connections_are_killed(
    settings: Settings, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="core.reconnect")
    admin = aioredis.Redis.from_url(REDIS_URL)
    try:
        async with running(settings) as (worker, outside):
            await _all_subscribed(admin, worker)
            # Once before the blink: the wiring works.
            await outside.mail("before")
            await outside.mailed("before", timeout=15)
            caplog.clear()

            killed = await kill(admin, worker)
            assert killed
            # Every loop subscribes again, on new connections, well before its poll would run.
            await _all_subscribed(admin, worker, except_ids=frozenset(killed))

            await outside.mail("after")
            await outside.mailed("after", timeout=15)
            await outside.webhook(timeout=15)
            await outside.run_task(timeout=30)

            # Each loop said once that it lost Redis and once that it is back.
            lost = [r for r in caplog.records if r.levelno == logging.WARNING and "lost Redis" in r.getMessage()]
            back = [r for r in caplog.records if r.levelno == logging.INFO and "Redis is back" in r.getMessage()]
            assert len(lost) == WORKER_SUBSCRIPTIONS, [r.getMessage() for r in lost]
            assert len(back) == WORKER_SUBSCRIPTIONS, [r.getMessage() for r in back]
    finally:
        await admin.aclose()


async def test_a_worker_started_while_redis_is_down_polls_meanwhile_and_subscribes_once_it_is_up(
    settings: Settings, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # From the start: a loop's second failed attempt comes a few tenths of a second in, maybe before anything below.
    caplog.set_level(logging.DEBUG, logger="core.reconnect")
    port = free_port()
    base = f"redis://127.0.0.1:{port}/0"
    async with running(settings, base) as (worker, outside):
        # Nothing listens on `port`: the loops live on. (The poll is slow here, so mail waits for Redis; a
        # loop that died at start would never send it.)
        await outside.mail("while down")

        async def retried() -> bool | None:
            # Each loop has failed more than once (and warned once, asserted below): it keeps trying.
            failed = [r.getMessage() for r in caplog.records if ": attempt 2 failed" in r.getMessage()]
            return all(any(line.startswith(loop) for line in failed) for loop in WORKER_LOOPS) or None

        await until(retried, timeout=15)
        async with redis_server(port, tmp_path) as admin:
            await _all_subscribed(admin, worker)
            # Subscribing again is when a loop looks for what it may have missed.
            await outside.mailed("while down", timeout=15)
            await outside.mail("after")
            await outside.mailed("after", timeout=15)
            await outside.webhook(timeout=15)
            await outside.run_task(timeout=30)
            # One warning per loop however many attempts failed meanwhile, and one line once it was back.
            for said in ("lost Redis", ": Redis is back"):
                lines = [r.getMessage() for r in caplog.records if said in r.getMessage()]
                assert len([line for line in lines if line.startswith(WORKER_LOOPS)]) == len(WORKER_LOOPS), lines


async def test_the_chat_fan_out_hears_the_worker_again_after_the_web_process_loses_redis(
    settings: Settings, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="core.reconnect")
    web_url, web_name = named_url("chat-web")
    chat_settings = settings.with_changes(base_url=None, redis_url=web_url)
    from chat.fanout import WorkerEmitter

    admin = aioredis.Redis.from_url(REDIS_URL)
    emitter = WorkerEmitter(REDIS_URL)
    worker_db = Database(settings.database_url, RedisBus(REDIS_URL))
    worker_db.add_event_sink(emitter.sink)
    watcher = Watcher()
    try:
        with live_server(chat_settings, run_worker=False) as base:
            execution_id = await new_execution(worker_db, chat_settings)
            token = chat_view_token(chat_settings.secret_key, execution_id)
            await watcher.connect(base, auth={"executionId": execution_id, "token": token})
            assert (await watcher.join(execution_id, token=token))["ok"] is True
            (seq,) = await append(worker_db, execution_id)
            await watcher.until_live(execution_id, seq)

            async def fan_out_subscribed(except_ids: frozenset[str]) -> set[str] | None:
                return await subscribed(admin, web_name, except_ids=except_ids) or None

            await until(lambda: fan_out_subscribed(frozenset()), timeout=15)
            caplog.clear()
            killed = await kill(admin, web_name)
            assert killed
            # Subscribed again (said so, and Redis agrees): what is published from now on is heard.
            await until(lambda: _some(_said(caplog, "the chat's Socket.IO listener: Redis is back")), timeout=15)
            await until(lambda: fan_out_subscribed(frozenset(killed)), timeout=15)
            (seq,) = await append(worker_db, execution_id)
            await watcher.until_live(execution_id, seq)
            assert len(_said(caplog, "the chat's Socket.IO listener lost Redis")) == 1
            assert len(_said(caplog, "the chat's Socket.IO listener: Redis is back")) == 1
    finally:
        await watcher.close()
        await worker_db.dispose()
        await worker_db.bus.close()
        await emitter.close()
        await admin.aclose()
