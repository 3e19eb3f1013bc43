"""Request rate limits per API key (spec §8: 100 requests per minute): GCRA, in process or in Redis.

GCRA (the generic cell rate algorithm) keeps one number per key, its theoretical arrival time (TAT): the
moment the key's bucket would be empty again had it made no request since. A key may make `limit` requests
at once and then one every `interval` (window / limit): for 100 a minute, a burst of 100, then one per 0.6 s.
All arithmetic is in integer microseconds, so remaining and reset values are exact, not float-rounded.

Two limiters behave the same: `InProcessRateLimiter` for one process (the embedded default) and
`RedisRateLimiter`, whose state lives in Redis so that every web process shares one budget per key.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from redis.exceptions import NoScriptError, RedisError

from core.redis_calls import OrderedCalls, Packed
from core.settings import Settings

log = logging.getLogger(__name__)

MICROS = 1_000_000
REDIS_PREFIX = "vouch:ratelimit:"

Clock = Callable[[], int]
"""Microseconds on some fixed scale; only differences matter to the in-process limiter."""


def monotonic_micros() -> int:
    return time.monotonic_ns() // 1000


def ceil_seconds(micros: int) -> int:
    return -(-micros // MICROS)


@dataclass(frozen=True)
class Policy:
    limit: int
    window_seconds: int

    def __post_init__(self) -> None:
        if self.limit < 1 or self.window_seconds < 1:
            raise ValueError("a rate limit needs limit >= 1 and window_seconds >= 1")

    @property
    def interval(self) -> int:
        """Microseconds one request occupies; rounded to a whole microsecond when window/limit is not one."""
        return max(1, round(self.window_seconds * MICROS / self.limit))

    @property
    def span(self) -> int:
        """The window as GCRA sees it: `limit` whole intervals, so the burst is exactly `limit`."""
        return self.interval * self.limit


@dataclass(frozen=True)
class Decision:
    allowed: bool
    limit: int
    remaining: int
    # Microseconds until the key's whole quota is back, had it made no more requests.
    reset_after: int
    # Microseconds until a refused request would be admitted; 0 when this one was.
    retry_after: int


def gcra(policy: Policy, tat: int | None, now: int) -> tuple[Decision, int | None]:
    """One request at `now` against a stored TAT (None: never seen); the decision and the TAT to store
    (None: leave it, a refused request costs nothing). The Lua script in RedisRateLimiter mirrors this."""
    tat = now if tat is None or tat < now else tat
    new_tat = tat + policy.interval
    if new_tat - now > policy.span:
        return Decision(False, policy.limit, 0, tat - now, new_tat - policy.span - now), None
    reset_after = new_tat - now
    return Decision(True, policy.limit, (policy.span - reset_after) // policy.interval, reset_after, 0), new_tat


class RateLimiter(Protocol):
    @property
    def policy(self) -> Policy: ...

    async def hit(self, key: str) -> Decision:
        """Count one request for `key` (unless refused) and say whether it may proceed."""

    async def close(self) -> None: ...


class InProcessRateLimiter:
    """For one process. Held by the app (Services), so two apps in one process never share budgets."""

    def __init__(self, policy: Policy, clock: Clock = monotonic_micros) -> None:
        self.policy = policy
        self._clock = clock
        self._tats: dict[str, int] = {}
        self._next_sweep: int | None = None

    def hit_now(self, key: str) -> Decision:
        # No await between reading and writing the TAT: atomic within the event loop.
        now = self._clock()
        self._sweep(now)
        decision, new_tat = gcra(self.policy, self._tats.get(key), now)
        if new_tat is not None:
            self._tats[key] = new_tat
        return decision

    async def hit(self, key: str) -> Decision:
        return self.hit_now(key)

    def _sweep(self, now: int) -> None:
        # A TAT in the past means a full bucket, exactly as if the key were unknown: forgetting it loses
        # nothing. Sweeping once per window keeps memory to the keys used in the last two windows.
        if self._next_sweep is not None and now < self._next_sweep:
            return
        self._tats = {key: tat for key, tat in self._tats.items() if tat > now}
        self._next_sweep = now + self.policy.span

    def __len__(self) -> int:
        return len(self._tats)

    async def close(self) -> None:
        self._tats.clear()


# KEYS[1]: the key's TAT. ARGV: interval, span, now (all microseconds; now '' = Redis's own clock).
# The clock is Redis's TIME: web processes on several machines then compare the one shared TAT against one
# clock. With each process's own clock, a process running a second ahead would admit requests early (and
# one behind refuse them late), and the limit would no longer be exact. `now` is passed only by tests.
# The key expires when its TAT passes: a full bucket needs no state. Numbers go out through '%d' because Lua
# (5.1) would print a 16-digit microsecond count in exponent form and lose digits.
_GCRA_LUA = """
if redis.replicate_commands then redis.replicate_commands() end
local interval = tonumber(ARGV[1])
local span = tonumber(ARGV[2])
local now
if ARGV[3] ~= '' then
  now = tonumber(ARGV[3])
else
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
end
local tat = tonumber(redis.call('GET', KEYS[1]))
if tat == nil or tat < now then tat = now end
local new_tat = tat + interval
if new_tat - now > span then
  return {0, 0, tat - now, new_tat - span - now}
end
local reset_after = new_tat - now
redis.call('SET', KEYS[1], string.format('%d', new_tat), 'PX', string.format('%d', math.ceil(reset_after / 1000)))
return {1, math.floor((span - reset_after) / interval), reset_after, 0}
"""


class RedisRateLimiter:
    """Shared by every process that points at the same Redis: one atomic script per request.

    When Redis cannot be reached, requests are limited by a per-process fallback instead. Refusing every
    keyed request would turn a Redis outage into an API outage, while admitting all of them would drop the
    protection entirely; the fallback keeps each process to the limit (so N processes to N times it) until
    Redis answers again. After a failure Redis is left alone for `retry_seconds`, so that a Redis that hangs
    costs one timeout per interval, not one per request.
    """

    def __init__(
        self,
        url: str,
        policy: Policy,
        *,
        prefix: str = REDIS_PREFIX,
        clock: Clock | None = None,
        timeout: float = 2.0,
        retry_seconds: float = 5.0,
    ) -> None:
        self.policy = policy
        self.prefix = prefix
        self._clock = clock
        # The whole call is held to `timeout` here (the connection has no socket timeout: core/redis_calls.py).
        self._calls = OrderedCalls(url, timeout)
        self._timeout = timeout
        self._script = _Script(self._calls)
        self._fallback = InProcessRateLimiter(policy)
        self._retry_seconds = retry_seconds
        self._down_until: float | None = None

    async def hit(self, key: str) -> Decision:
        if self._down_until is not None and time.monotonic() < self._down_until:
            return self._fallback.hit_now(key)
        now = "" if self._clock is None else str(self._clock())
        try:
            async with asyncio.timeout(self._timeout):
                raw = await self._script.run(self.prefix + key, (self.policy.interval, self.policy.span, now))
            if not isinstance(raw, list) or len(raw) != 4:
                raise RedisError(f"unexpected answer from the rate limit script: {raw!r}")
        except (RedisError, OSError, TimeoutError) as exc:
            if isinstance(exc, TimeoutError):
                await self._calls.reset()  # a connection that hangs is not used again
            if self._down_until is None:
                log.warning("rate limiter: Redis unavailable (%s); limiting per process until it is back", exc)
            self._down_until = time.monotonic() + self._retry_seconds
            return self._fallback.hit_now(key)
        if self._down_until is not None:
            log.info("rate limiter: Redis is back; limits are shared again")
            self._down_until = None
        allowed, remaining, reset_after, retry_after = (int(v) for v in raw)
        return Decision(bool(allowed), self.policy.limit, remaining, reset_after, retry_after)

    @property
    def degraded(self) -> bool:
        """True while requests are limited per process because Redis failed."""
        return self._down_until is not None

    async def close(self) -> None:
        await self._calls.close()


class _Script:
    """The GCRA script by EVALSHA on the limiter's own connection (core/redis_calls.py), loaded again when Redis
    answers NOSCRIPT (after a restart or FLUSH). With Redis's clock (no `now`), a key's command is the same every
    time: it is packed once."""

    MAX_PACKED = 10_000

    def __init__(self, calls: OrderedCalls) -> None:
        self.calls = calls
        self.sha = hashlib.sha1(_GCRA_LUA.encode()).hexdigest()
        self._packed: dict[tuple[str, tuple[int | str, ...]], Packed] = {}

    async def run(self, key: str, args: tuple[int | str, ...]) -> Any:
        try:
            return await self.calls.call_packed(self._evalsha(key, args))
        except NoScriptError:
            loaded = await self.calls.call("SCRIPT", "LOAD", _GCRA_LUA)
            self.sha = loaded.decode() if isinstance(loaded, bytes) else str(loaded)
            self._packed.clear()
            return await self.calls.call_packed(self._evalsha(key, args))

    def _evalsha(self, key: str, args: tuple[int | str, ...]) -> Packed:
        if args[-1] != "":  # a test's own clock: a new `now` every time
            return self.calls.pack("EVALSHA", self.sha, 1, key, *args)
        found = self._packed.get((key, args))
        if found is None:
            if len(self._packed) >= self.MAX_PACKED:
                self._packed.clear()
            found = self._packed[(key, args)] = self.calls.pack("EVALSHA", self.sha, 1, key, *args)
        return found


def make_rate_limiter(settings: Settings) -> RateLimiter:
    policy = Policy(settings.rate_limit, settings.rate_limit_window_seconds)
    if settings.redis_url:
        return RedisRateLimiter(settings.redis_url, policy)
    return InProcessRateLimiter(policy)
