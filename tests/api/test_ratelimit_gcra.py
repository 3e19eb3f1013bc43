"""The GCRA arithmetic, exact to the microsecond, on both limiters (Redis fed the same injected clock)."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Callable

import pytest

from api.ratelimit import Decision, InProcessRateLimiter, Policy, RateLimiter, RedisRateLimiter, gcra
from api.ratelimit_http import rate_limit_headers
from tests.support.ratelimits import REDIS_URL, START, FakeClock, delete_prefix

SPEC = Policy(limit=100, window_seconds=60)
INTERVAL = 600_000  # 60 s / 100, in microseconds

MakeLimiter = Callable[[Policy, FakeClock], RateLimiter]


@pytest.fixture(params=["in_process", "redis"])
async def make_limiter(request: pytest.FixtureRequest) -> AsyncIterator[MakeLimiter]:
    made: list[RateLimiter] = []
    prefix = f"vouch-test:{uuid.uuid4().hex}:"

    def make(policy: Policy, clock: FakeClock) -> RateLimiter:
        limiter: RateLimiter
        if request.param == "redis":
            limiter = RedisRateLimiter(REDIS_URL, policy, prefix=prefix, clock=clock)
        else:
            limiter = InProcessRateLimiter(policy, clock=clock)
        made.append(limiter)
        return limiter

    yield make
    for limiter in made:
        if isinstance(limiter, RedisRateLimiter):
            assert not limiter.degraded, "the Redis limiter fell back: these results came from memory"
        await limiter.close()
    await delete_prefix(prefix)


async def test_a_burst_of_100_then_the_101st_is_refused(make_limiter: MakeLimiter) -> None:
    limiter = make_limiter(SPEC, FakeClock())
    for k in range(1, 101):
        assert await limiter.hit("key") == Decision(True, 100, 100 - k, k * INTERVAL, 0)
    assert await limiter.hit("key") == Decision(False, 100, 0, 60_000_000, INTERVAL)


async def test_one_request_comes_back_every_0_6_seconds(make_limiter: MakeLimiter) -> None:
    clock = FakeClock()
    limiter = make_limiter(SPEC, clock)
    for _ in range(100):
        assert (await limiter.hit("key")).allowed
    clock.advance(INTERVAL - 1)
    assert await limiter.hit("key") == Decision(False, 100, 0, 60_000_000 - INTERVAL + 1, 1)
    clock.advance(1)
    assert await limiter.hit("key") == Decision(True, 100, 0, 60_000_000, 0)
    # Refused requests cost nothing: the next one is again exactly one interval away.
    assert await limiter.hit("key") == Decision(False, 100, 0, 60_000_000, INTERVAL)
    clock.advance(6_000_000)  # ten intervals: ten requests, not eleven
    assert [(await limiter.hit("key")).allowed for _ in range(11)] == [True] * 10 + [False]


async def test_a_steady_pace_of_one_per_interval_is_never_refused(make_limiter: MakeLimiter) -> None:
    clock = FakeClock()
    limiter = make_limiter(SPEC, clock)
    for _ in range(100):
        await limiter.hit("key")
    for _ in range(150):
        clock.advance(INTERVAL)
        assert (await limiter.hit("key")).allowed


async def test_an_idle_key_is_whole_again_after_the_window(make_limiter: MakeLimiter) -> None:
    clock = FakeClock()
    limiter = make_limiter(SPEC, clock)
    for _ in range(40):
        await limiter.hit("key")
    assert (await limiter.hit("key")).reset_after == 41 * INTERVAL
    clock.advance(41 * INTERVAL)
    assert await limiter.hit("key") == Decision(True, 100, 99, INTERVAL, 0)


async def test_keys_have_separate_budgets(make_limiter: MakeLimiter) -> None:
    limiter = make_limiter(SPEC, FakeClock())
    for _ in range(100):
        await limiter.hit("a")
    assert not (await limiter.hit("a")).allowed
    assert await limiter.hit("b") == Decision(True, 100, 99, INTERVAL, 0)


async def test_an_uneven_window_still_allows_exactly_limit(make_limiter: MakeLimiter) -> None:
    policy = Policy(limit=7, window_seconds=60)  # 60/7 s is no whole number of microseconds
    assert (policy.interval, policy.span) == (8_571_429, 60_000_003)
    clock = FakeClock()
    limiter = make_limiter(policy, clock)
    assert [(await limiter.hit("key")).remaining for _ in range(7)] == [6, 5, 4, 3, 2, 1, 0]
    refused = await limiter.hit("key")
    assert not refused.allowed and refused.retry_after == policy.interval
    clock.advance(policy.interval)
    assert (await limiter.hit("key")).allowed


def test_the_in_process_limiter_forgets_keys_whose_quota_is_whole() -> None:
    clock = FakeClock()
    limiter = InProcessRateLimiter(SPEC, clock=clock)
    for n in range(1000):
        limiter.hit_now(f"key-{n}")
    assert len(limiter) == 1000
    clock.advance(30_000_000)
    limiter.hit_now("busy")  # their quotas are whole again, but sweeps come once a window: not yet
    assert len(limiter) == 1001
    clock.advance(30_000_000)
    limiter.hit_now("busy")  # a window since the last sweep: every key whose TAT has passed goes
    assert len(limiter) == 1
    assert limiter.hit_now("key-1") == Decision(True, 100, 99, INTERVAL, 0)


def test_gcra_leaves_the_tat_alone_on_refusal() -> None:
    full = START + SPEC.span
    decision, new_tat = gcra(SPEC, full, START)
    assert not decision.allowed and new_tat is None
    decision, new_tat = gcra(SPEC, None, START)
    assert decision.allowed and new_tat == START + INTERVAL


def test_headers_follow_the_draft_and_round_up() -> None:
    allowed = Decision(True, 100, 57, 25_800_001, 0)
    assert rate_limit_headers(SPEC, allowed) == {
        "RateLimit-Policy": '"default";q=100;w=60',
        "RateLimit": '"default";r=57;t=26',
        "X-RateLimit-Limit": "100",
        "X-RateLimit-Remaining": "57",
        "X-RateLimit-Reset": "26",
    }
    refused = Decision(False, 100, 0, 60_000_000, 1)
    headers = rate_limit_headers(SPEC, refused)
    # t is the Retry-After (1 s: a microsecond rounds up to a whole second), Reset the whole quota.
    assert (headers["RateLimit"], headers["X-RateLimit-Reset"]) == ('"default";r=0;t=1', "60")
