"""core/redis_calls.py against a real Redis: answers go to their callers in order, an error answer to its own
caller only, and a connection killed under it fails what was in flight and is made again by the next call."""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import pytest
import redis.asyncio as aioredis
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import ResponseError

from core.redis_calls import OrderedCalls

REDIS_URL = "redis://127.0.0.1:6379/0"


async def test_concurrent_calls_each_get_their_own_answer() -> None:
    calls = OrderedCalls(REDIS_URL, 2.0)
    try:
        answers = await asyncio.gather(*(calls.call("ECHO", f"m{n}") for n in range(200)))
        assert answers == [f"m{n}".encode() for n in range(200)]
    finally:
        await calls.close()


async def test_an_error_answer_goes_to_its_caller_only() -> None:
    calls = OrderedCalls(REDIS_URL, 2.0)
    try:
        results = await asyncio.gather(
            calls.call("ECHO", "before"), calls.call("NOSUCHCOMMAND"), calls.call("ECHO", "after"),
            return_exceptions=True,
        )
        assert results[0] == b"before" and results[2] == b"after"
        assert isinstance(results[1], ResponseError)
    finally:
        await calls.close()


async def test_a_killed_connection_is_made_again_by_the_next_call() -> None:
    name = f"calls-{uuid.uuid4().hex[:8]}"
    calls = OrderedCalls(f"{REDIS_URL}?client_name={name}", 2.0)
    admin = aioredis.Redis.from_url(REDIS_URL)
    try:
        assert await calls.call("PING") in (b"PONG", True)
        # BLPOP holds its answer while the connection is killed under it.
        blocked = asyncio.ensure_future(calls.call("BLPOP", f"{name}:never", 10))
        await asyncio.sleep(0)
        for client in await admin.client_list():
            if client.get("name") == name:
                await admin.client_kill_filter(_id=client["id"])
        with pytest.raises((RedisConnectionError, ConnectionError)):
            await asyncio.wait_for(blocked, 5)
        assert await calls.call("ECHO", "again") == b"again"
    finally:
        await calls.close()
        await admin.aclose()


async def test_callers_that_stop_waiting_do_not_shift_the_others_answers() -> None:
    # Calls queued in one loop turn leave in one write; a caller that gives up (its request cancelled) still has
    # its answer read from the wire, and dropped, so every later answer reaches its own caller.
    calls = OrderedCalls(REDIS_URL, 2.0)
    try:
        answers = [calls.call_packed(calls.pack("ECHO", f"m{n}")) for n in range(90)]
        for answer in answers[::3]:
            answer.cancel()
        kept = await asyncio.gather(*answers[1::3], *answers[2::3])
        assert kept == [f"m{n}".encode() for n in range(1, 90, 3)] + [f"m{n}".encode() for n in range(2, 90, 3)]
        assert await calls.call("ECHO", "after") == b"after"
    finally:
        await calls.close()


async def test_a_write_in_the_callers_step_waits_behind_calls_already_queued() -> None:
    calls = OrderedCalls(REDIS_URL, 2.0)
    try:
        assert await calls.call("PING") in (b"PONG", True)  # connected, so `send` may write at once
        queued = calls.call_packed(calls.pack("ECHO", "queued first"))
        (sent,) = await calls.send([("ECHO", "sent second")])
        assert list(await asyncio.gather(queued, sent)) == [b"queued first", b"sent second"]
    finally:
        await calls.close()


async def test_calls_after_close_fail_at_once() -> None:
    calls = OrderedCalls(REDIS_URL, 2.0)
    assert await calls.call("ECHO", "x") == b"x"
    await calls.close()
    with pytest.raises(RedisConnectionError):
        await calls.call("ECHO", "y")


class _CountingProxy:
    """A TCP relay between a client and Redis that counts the bytes Redis sends back, and can hold them back."""

    def __init__(self) -> None:
        self.answered_bytes = 0
        self.holding = asyncio.Event()  # set: what Redis sends is held back, as from a server that stopped answering
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    async def start(self) -> str:
        self._server = await asyncio.start_server(self._relay, "127.0.0.1", 0)
        port = self._server.sockets[0].getsockname()[1]
        return f"redis://127.0.0.1:{port}/0"

    async def _relay(self, client_reader: asyncio.StreamReader, client_writer: asyncio.StreamWriter) -> None:
        redis_reader, redis_writer = await asyncio.open_connection("127.0.0.1", 6379)

        async def pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, answers: bool) -> None:
            try:
                while data := await reader.read(65536):
                    if answers:
                        self.answered_bytes += len(data)
                        if self.holding.is_set():
                            continue
                    writer.write(data)
                    await writer.drain()
            except (ConnectionError, asyncio.CancelledError):
                pass
            finally:
                writer.close()

        for task in (pipe(client_reader, redis_writer, False), pipe(redis_reader, client_writer, True)):
            self._tasks.add(asyncio.ensure_future(task))

    async def close(self) -> None:
        assert self._server is not None
        self._server.close()
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)


async def _heard(pubsub: Any, count: int) -> list[bytes]:
    heard: list[bytes] = []
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 5.0
    while len(heard) < count:
        assert loop.time() < deadline, f"heard {len(heard)} of {count}"
        # None for nothing within the timeout, and for the subscription's own confirmation.
        message = await pubsub.get_message(ignore_subscribe_messages=True, timeout=1.0)
        if message is not None:
            heard.append(message["data"])
    return heard


@dataclass
class _Quiet:
    proxy: _CountingProxy
    calls: OrderedCalls
    pubsub: Any
    channel: str

    async def publish(self, message: str) -> None:
        await self.calls.send_quiet([("PUBLISH", self.channel, message)])


@contextlib.asynccontextmanager
async def _quiet(answer_timeout: float, user: str | None = None) -> AsyncIterator[_Quiet]:
    """A quiet connection to Redis through a counting relay (as `user`, when given), and a subscriber."""
    proxy = _CountingProxy()
    url = await proxy.start()
    if user is not None:
        url = url.replace("redis://", f"redis://{user}@")
    calls = OrderedCalls(url, 2.0, answer_timeout, quiet=True)
    listener = aioredis.Redis.from_url(REDIS_URL)
    pubsub = listener.pubsub()
    channel = f"quiet-{uuid.uuid4().hex[:8]}"
    try:
        await pubsub.subscribe(channel)
        yield _Quiet(proxy, calls, pubsub, channel)
    finally:
        await calls.close()
        await pubsub.aclose()
        await listener.aclose()
        await proxy.close()


async def test_a_quiet_connection_publishes_and_redis_answers_only_its_probes() -> None:
    async with _quiet(2.0) as q:
        await q.publish("first")  # connects, then asks for quiet
        await q.calls.handled()
        before = q.proxy.answered_bytes
        for n in range(200):
            await q.publish(f"m{n}")
        await q.calls.handled()
        # Two probes at most (one due with the writes, one asked for), each answered by "+OK\r\n".
        assert q.proxy.answered_bytes - before <= 2 * len(b"+OK\r\n")
        assert await _heard(q.pubsub, 201) == [b"first", *(f"m{n}".encode() for n in range(200))]


async def test_a_quiet_connection_whose_redis_stops_answering_counts_as_lost_and_is_made_again() -> None:
    async with _quiet(0.5) as q:
        await q.publish("before")
        await q.calls.handled()
        q.proxy.holding.set()
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(q.calls.handled(), 5.0)
        assert not q.calls.connected
        q.proxy.holding.clear()
        await q.publish("after")
        await asyncio.wait_for(q.calls.handled(), 5.0)
        assert await _heard(q.pubsub, 2) == [b"before", b"after"]


async def test_where_redis_refuses_to_stop_answering_a_quiet_connection_reads_and_drops_the_answers() -> None:
    user = f"vouch-test-{uuid.uuid4().hex[:8]}"
    admin = aioredis.Redis.from_url(REDIS_URL)
    await admin.acl_setuser(
        user, enabled=True, nopass=True, keys=["*"], channels=["*"], categories=["+@all"], commands=["-client"]
    )
    try:
        async with _quiet(2.0, user) as q:
            for n in range(50):
                await q.publish(f"m{n}")
            await asyncio.wait_for(q.calls.handled(), 5.0)
            assert await _heard(q.pubsub, 50) == [f"m{n}".encode() for n in range(50)]
            # Redis answered every publish (":1\r\n"), and every answer was read in its turn: the probe's came last.
            assert q.proxy.answered_bytes >= 50 * len(b":1\r\n")
    finally:
        await admin.acl_deluser(user)
        await admin.aclose()


async def test_a_quiet_connection_takes_no_answered_calls() -> None:
    calls = OrderedCalls(REDIS_URL, 2.0, quiet=True)
    try:
        with pytest.raises(ValueError):
            await calls.call("PING")
    finally:
        await calls.close()
