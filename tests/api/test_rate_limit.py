"""The rate limit over HTTP: 100 requests per minute per key, headers on every keyed answer, 429 past it."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import pytest
import redis.asyncio as aioredis
import sqlalchemy as sa

from api.ratelimit import REDIS_PREFIX, InProcessRateLimiter, Policy, RedisRateLimiter
from core.apikeys import generate_key
from core.models import Execution
from core.settings import Settings, SettingsError, load_settings
from tests.api.helpers import CREATE, account, add_key, assert_problem, status_path, task
from tests.conftest import Service, bearer
from tests.support.ratelimits import REDIS_URL, FakeClock, closed_port, serving

RATE_HEADERS = ("RateLimit-Policy", "RateLimit", "X-RateLimit-Limit", "X-RateLimit-Remaining", "X-RateLimit-Reset")


@pytest.fixture
def clock(api_only: Service) -> FakeClock:
    """Stops time for the app's limiter: values are exact however slow the machine."""
    frozen = FakeClock()
    services = api_only.app.extensions["vouch"]
    assert services.rate_limiter.policy == Policy(100, 60)  # the spec's default reached the app
    services.rate_limiter = InProcessRateLimiter(services.rate_limiter.policy, clock=frozen)
    return frozen


def rate(response: Any) -> dict[str, str]:
    return {name: response.headers[name] for name in RATE_HEADERS if name in response.headers}


def expected(remaining: int, t: int, reset: int | None = None) -> dict[str, str]:
    return {
        "RateLimit-Policy": '"default";q=100;w=60',
        "RateLimit": f'"default";r={remaining};t={t}',
        "X-RateLimit-Limit": "100",
        "X-RateLimit-Remaining": str(remaining),
        "X-RateLimit-Reset": str(t if reset is None else reset),
    }


async def test_every_keyed_answer_carries_the_headers_errors_included(api_only: Service, clock: FakeClock) -> None:
    acct = await account(api_only, "owner@example.com", "eval:manage")
    reader = await account(api_only, "reader@example.com", "eval:read")
    client, key = api_only.client, bearer(acct.key)
    created = await client.post(CREATE, json=task(), headers=key)
    assert created.status_code == 201 and rate(created) == expected(99, 1)  # 0.6 s used, rounded up
    execution_id = (await created.get_json())["executionId"]
    answers = [
        (200, await client.get(status_path(execution_id), headers=key)),
        (404, await client.get(status_path("exe_unknown"), headers=key)),
        (422, await client.post(CREATE, json=task(testMode="sometimes"), headers=key)),
        (415, await client.post(CREATE, data="x", headers=key)),
    ]
    for n, (status, response) in enumerate(answers, start=2):
        assert response.status_code == status
        assert rate(response) == expected(100 - n, -(-n * 6 // 10)), status
    # A key without the scope is still a key: its 403 is counted against it, and says so.
    forbidden = await client.post(CREATE, json=task(), headers=bearer(reader.key))
    assert forbidden.status_code == 403 and rate(forbidden) == expected(99, 1)


async def test_the_101st_request_is_429_until_one_interval_passes(api_only: Service, clock: FakeClock) -> None:
    acct = await account(api_only, "owner@example.com", "eval:manage")
    client, key = api_only.client, bearer(acct.key)
    codes = [(await client.get(status_path("exe_unknown"), headers=key)).status_code for _ in range(100)]
    assert codes == [404] * 100
    refused = await client.post(CREATE, json=task(), headers=key)
    payload = await refused.get_json()
    assert_problem(refused, payload, 429, "rate_limit_exceeded", "Too Many Requests")
    assert refused.headers["Retry-After"] == "1"
    # On a 429 the draft's t is the Retry-After; X-RateLimit-Reset stays "whole quota back in 60 s".
    assert rate(refused) == expected(0, 1, reset=60)
    assert "100 requests per 60 seconds" in payload["detail"]
    async with api_only.db.reading() as session:  # refused before the view ran: nothing was created
        assert await session.scalar(sa.select(sa.func.count()).select_from(Execution)) == 0
    clock.advance(599_999)
    assert (await client.get(status_path("exe_unknown"), headers=key)).status_code == 429
    clock.advance(1)
    again = await client.get(status_path("exe_unknown"), headers=key)
    assert again.status_code == 404 and rate(again) == expected(0, 60)


async def test_requests_without_a_valid_key_are_not_counted(api_only: Service, clock: FakeClock) -> None:
    acct = await account(api_only, "owner@example.com", "eval:manage")
    mistyped = acct.key[:-1] + ("A" if acct.key[-1] != "A" else "B")
    for headers in ({}, {"Authorization": "Basic abc"}, bearer(mistyped), bearer(generate_key())):
        for _ in range(30):
            response = await api_only.client.get(status_path("exe_unknown"), headers=headers)
            assert response.status_code == 401 and rate(response) == {}
    first = await api_only.client.get(status_path("exe_unknown"), headers=bearer(acct.key))
    assert rate(first) == expected(99, 1)


async def test_each_key_has_its_own_budget(api_only: Service, clock: FakeClock) -> None:
    acct = await account(api_only, "owner@example.com", "eval:manage")
    _, other = await add_key(api_only, acct.email, "eval:manage")
    for _ in range(100):
        await api_only.client.get(status_path("exe_unknown"), headers=bearer(acct.key))
    assert (await api_only.client.get(status_path("exe_unknown"), headers=bearer(acct.key))).status_code == 429
    fresh = await api_only.client.get(status_path("exe_unknown"), headers=bearer(other))
    assert fresh.status_code == 404 and rate(fresh) == expected(99, 1)


async def test_limit_and_window_come_from_the_settings(settings: Settings) -> None:
    async with serving(settings.with_changes(rate_limit=5, rate_limit_window_seconds=3600)) as service:
        acct = await account(service, "owner@example.com", "eval:manage")
        answers = [await service.client.get(status_path("exe_x"), headers=bearer(acct.key)) for _ in range(6)]
    assert [a.status_code for a in answers] == [404] * 5 + [429]
    assert answers[0].headers["RateLimit-Policy"] == '"default";q=5;w=3600'
    assert answers[0].headers["RateLimit"] == '"default";r=4;t=720'  # one request holds 3600/5 s
    assert 0 < int(answers[5].headers["Retry-After"]) <= 720


def test_settings_read_the_limits_from_the_environment(tmp_path: Any) -> None:
    base = {"VOUCH_DATA_DIR": str(tmp_path), "VOUCH_SECRET_KEY": "k" * 32}
    defaults = load_settings(base)
    assert (defaults.rate_limit, defaults.rate_limit_window_seconds, defaults.concurrency_limit) == (100, 60, 10)
    changed = load_settings(
        {**base, "VOUCH_RATE_LIMIT": "7", "VOUCH_RATE_LIMIT_WINDOW_SECONDS": "3600", "VOUCH_CONCURRENCY_LIMIT": "3"}
    )
    assert (changed.rate_limit, changed.rate_limit_window_seconds, changed.concurrency_limit) == (7, 3600, 3)
    for name in ("VOUCH_RATE_LIMIT", "VOUCH_RATE_LIMIT_WINDOW_SECONDS", "VOUCH_CONCURRENCY_LIMIT"):
        with pytest.raises(SettingsError, match=name):
            load_settings({**base, name: "0"})


async def test_an_unreachable_redis_limits_per_process_instead_of_failing(settings: Settings) -> None:
    # An hour's window: one request's cell lasts 36 s, so a slow machine cannot refill the bucket between the two.
    dead = settings.with_changes(redis_url=f"redis://127.0.0.1:{closed_port()}/0", rate_limit_window_seconds=3600)
    async with serving(dead) as service:
        acct = await account(service, "owner@example.com", "eval:manage")
        created = await service.client.post(CREATE, json=task(), headers=bearer(acct.key))
        looked_up = await service.client.get(status_path("exe_unknown"), headers=bearer(acct.key))
        assert service.app.extensions["vouch"].rate_limiter.degraded
    assert created.status_code == 201 and created.headers["X-RateLimit-Remaining"] == "99"
    assert looked_up.status_code == 404 and looked_up.headers["X-RateLimit-Remaining"] == "98"


async def on_a_stopped_clock(service: Service, clock: FakeClock) -> None:
    """The app's own Redis limiter (its URL and policy), with time stopped and no deadline on Redis's answers.

    The test used to assume both, and a loaded machine broke them: 150 requests at once in one process can stall
    its event loop past the limiter's 2 s deadline while an answer is owed (the limiter then falls back to a
    per-process budget, as it should when Redis hangs: tests/api/test_ratelimit_redis.py), and a slow enough run
    would let a request's interval come back. Neither is what sharing one budget is about."""
    services = service.app.extensions["vouch"]
    built = services.rate_limiter
    assert isinstance(built, RedisRateLimiter) and built.policy == Policy(100, 60)
    await built.close()
    services.rate_limiter = RedisRateLimiter(REDIS_URL, built.policy, clock=clock, timeout=3600.0)


async def test_two_apps_sharing_redis_share_one_budget(settings: Settings) -> None:
    # Time stopped: no request comes back during the test, so exactly 100 of 150 pass.
    shared = settings.with_changes(redis_url=REDIS_URL)
    clock = FakeClock()
    async with serving(shared) as first, serving(shared) as second:
        for service in (first, second):
            await on_a_stopped_clock(service, clock)
        acct = await account(first, f"owner-{uuid.uuid4().hex[:8]}@example.com", "eval:manage")
        try:
            answers = await asyncio.gather(
                *(
                    (first if n % 2 else second).client.get(status_path("exe_unknown"), headers=bearer(acct.key))
                    for n in range(150)
                )
            )
        finally:
            redis = aioredis.Redis.from_url(REDIS_URL)
            await redis.delete(REDIS_PREFIX + acct.key_id)
            await redis.aclose()
        for service in (first, second):
            assert not service.app.extensions["vouch"].rate_limiter.degraded
    codes = [a.status_code for a in answers]
    # Each app got 75 requests: with budgets of their own, all 150 would have passed.
    assert (codes.count(404), codes.count(429)) == (100, 50)
    assert sorted(int(a.headers["X-RateLimit-Remaining"]) for a in answers if a.status_code == 404) == list(range(100))
