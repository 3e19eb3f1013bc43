"""The Redis limiter against the real Redis at 127.0.0.1:6379: Redis's own clock, atomicity across clients,
script reloading, and what happens when Redis is gone."""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest
import redis.asyncio as aioredis
from redis.exceptions import ConnectionError as RedisConnectionError

from api.ratelimit import Policy, RedisRateLimiter
from tests.api.test_ratelimit_gcra import SPEC
from tests.support.ratelimits import REDIS_URL, closed_port, delete_prefix

# Long enough that no request comes back while a test runs: counts are then exact under real time.
NO_REFILL = Policy(limit=100, window_seconds=3600)


@pytest.fixture
async def prefix() -> AsyncIterator[str]:
    name = f"vouch-test:{uuid.uuid4().hex}:"
    yield name
    await delete_prefix(name)


async def test_redis_clock_burst_then_refusal_and_the_key_expires_with_its_tat(prefix: str) -> None:
    limiter = RedisRateLimiter(REDIS_URL, SPEC, prefix=prefix)
    try:
        decisions = [await limiter.hit("key") for _ in range(101)]
    finally:
        await limiter.close()
    assert [d.allowed for d in decisions] == [True] * 100 + [False]
    assert [d.remaining for d in decisions[:100]] == list(range(99, -1, -1))
    refused = decisions[-1]
    # Real time passed between the calls, so only bounds are exact here (the fake-clock tests pin values).
    assert 0 < refused.retry_after <= SPEC.interval and 0 < refused.reset_after <= SPEC.span
    client = aioredis.Redis.from_url(REDIS_URL)
    try:
        ttl = await client.pttl(f"{prefix}key")
        stored = await client.get(f"{prefix}key")
    finally:
        await client.aclose()
    assert 0 < ttl <= 60_000  # no key outlives its TAT: idle keys cost Redis nothing
    assert stored is not None and stored.isdigit(), stored  # whole microseconds, no exponent form


async def test_parallel_hits_from_two_clients_admit_exactly_the_limit(prefix: str) -> None:
    # 150 hits at once open up to 150 connections; on a loaded machine some take longer than the default
    # timeout, and a limiter that gave up on Redis would count per process: that is another test's subject.
    first = RedisRateLimiter(REDIS_URL, NO_REFILL, prefix=prefix, timeout=30.0)
    second = RedisRateLimiter(REDIS_URL, NO_REFILL, prefix=prefix, timeout=30.0)
    try:
        decisions = await asyncio.gather(*((first if n % 2 else second).hit("key") for n in range(150)))
        assert not first.degraded and not second.degraded
    finally:
        await first.close()
        await second.close()
    allowed = [d for d in decisions if d.allowed]
    assert len(allowed) == 100
    assert sorted(d.remaining for d in allowed) == list(range(100))  # each remaining handed out once


async def test_a_script_missing_from_redis_is_loaded_again(prefix: str) -> None:
    limiter = RedisRateLimiter(REDIS_URL, SPEC, prefix=prefix)
    try:
        # As after a Redis restart or SCRIPT FLUSH (not done here: other processes share this Redis):
        # EVALSHA of an unknown digest answers NOSCRIPT, and the limiter must load the script and go on.
        limiter._script.sha = "0" * 40
        decision = await limiter.hit("key")
        assert decision.allowed and decision.remaining == 99 and not limiter.degraded
        assert limiter._script.sha != "0" * 40
    finally:
        await limiter.close()


async def test_without_redis_each_process_still_limits(caplog: pytest.LogCaptureFixture) -> None:
    limiter = RedisRateLimiter(f"redis://127.0.0.1:{closed_port()}/0", SPEC, prefix="unused:")
    try:
        with caplog.at_level(logging.WARNING, logger="api.ratelimit"):
            decisions = [await limiter.hit("key") for _ in range(101)]
        assert limiter.degraded
        assert [d.allowed for d in decisions] == [True] * 100 + [False]
    finally:
        await limiter.close()
    warnings = [r for r in caplog.records if r.name == "api.ratelimit"]
    assert len(warnings) == 1 and "Redis unavailable" in warnings[0].getMessage()  # once per outage


async def test_the_limiter_goes_back_to_redis_when_it_answers_again(
    prefix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    limiter = RedisRateLimiter(REDIS_URL, SPEC, prefix=prefix, retry_seconds=0)
    try:

        async def refused(*_: Any) -> Any:
            raise RedisConnectionError("connection refused")

        with monkeypatch.context() as patch:
            patch.setattr(limiter._script, "run", refused)
            assert (await limiter.hit("key")).allowed
            assert limiter.degraded
        assert (await limiter.hit("key")).remaining == 99  # from Redis: the outage's hit was counted locally
        assert not limiter.degraded
    finally:
        await limiter.close()
