"""core/redis_calls.py against a real Redis: answers go to their callers in order, an error answer to its own
caller only, and a connection killed under it fails what was in flight and is made again by the next call."""

from __future__ import annotations

import asyncio
import uuid

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
