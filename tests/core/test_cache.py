"""core/cache.py: LRU and TTL bounds, and fills that lose to an invalidation made while they read."""

from __future__ import annotations

import asyncio

import pytest

from core.cache import InvalidatingCache


def test_a_fill_that_read_before_an_invalidation_is_not_stored() -> None:
    cache: InvalidatingCache[str, int] = InvalidatingCache(ttl=5, max_entries=10)
    ticket = cache.ticket("a")  # the fill starts reading...
    cache.invalidate("a")  # ...the row changes and the bus says so...
    assert not cache.put("a", 1, ticket)  # ...so what it read is stale
    assert cache.get("a") is None
    assert cache.put("a", 2, cache.ticket("a")) and cache.get("a") == 2
    ticket = cache.ticket("b")
    cache.clear()
    assert not cache.put("b", 1, ticket)


def test_entries_expire_and_the_least_recently_used_goes_first() -> None:
    now = [100.0]
    cache: InvalidatingCache[str, int] = InvalidatingCache(ttl=5, max_entries=2, clock=lambda: now[0])
    cache.put("a", 1, cache.ticket("a"))
    cache.put("b", 2, cache.ticket("b"))
    assert cache.get("a") == 1
    cache.put("c", 3, cache.ticket("c"))  # "b" was used least recently
    assert cache.get("b") is None and cache.get("a") == 1 and cache.get("c") == 3
    now[0] += 5
    assert cache.get("a") is None and len(cache) == 1


def test_nothing_is_stored_while_the_bus_cannot_be_heard_or_with_a_ttl_of_zero() -> None:
    cache: InvalidatingCache[str, int] = InvalidatingCache(ttl=5, max_entries=2)
    cache.hearing = lambda: False
    assert not cache.put("a", 1, cache.ticket("a"))
    off: InvalidatingCache[str, int] = InvalidatingCache(ttl=0, max_entries=2)
    assert not off.put("a", 1, off.ticket("a")) and off.get("a") is None


async def test_a_fill_begun_before_its_key_was_heard_reads_without_storing() -> None:
    cache: InvalidatingCache[str, int] = InvalidatingCache(ttl=5, max_entries=10)
    heard: set[str] = set()
    cache.follows = lambda key: key in heard
    ticket = cache.ticket("a")  # the fill starts reading before the key's news reaches this process...
    heard.add("a")
    assert not cache.put("a", 1, ticket)  # ...so a change committed meanwhile may have gone unheard
    assert await cache.get_or_fill("b", lambda: _value(2)) == 2 and cache.get("b") is None
    assert await cache.get_or_fill("a", lambda: _value(3)) == 3 and cache.get("a") == 3


async def test_a_cache_that_is_off_asks_for_no_keys_news() -> None:
    asked: list[str] = []

    def follows(key: str) -> bool:
        asked.append(key)
        return True

    off: InvalidatingCache[str, int] = InvalidatingCache(ttl=0, max_entries=2)
    deaf: InvalidatingCache[str, int] = InvalidatingCache(ttl=5, max_entries=2)
    deaf.hearing = lambda: False
    for cache in (off, deaf):
        cache.follows = follows
        assert await cache.get_or_fill("a", lambda: _value(1)) == 1
    assert asked == []


async def _value(value: int) -> int:
    return value


class Reads:
    """A fill that counts its calls and holds each read open until `done` is set."""

    def __init__(self, value: int | None = 7, fail_first: bool = False) -> None:
        self.value, self.fail_first = value, fail_first
        self.calls = 0
        self.started = asyncio.Event()
        self.done = asyncio.Event()
        # Set as a read ends: its caller goes on in the same step of the loop, before whoever waits on this.
        self.ended = asyncio.Event()

    async def __call__(self) -> int | None:
        self.calls += 1
        self.started.set()
        await self.done.wait()
        self.ended.set()
        if self.fail_first and self.calls == 1:
            raise RuntimeError("the database went away")
        return self.value


async def misses(cache: InvalidatingCache[str, int], reads: Reads, n: int) -> list[asyncio.Task[int | None]]:
    """`n` requests missing "a" at once; returns once the first has begun reading and the rest wait."""
    first = asyncio.create_task(cache.get_or_fill("a", reads))
    await reads.started.wait()
    rest = [asyncio.create_task(cache.get_or_fill("a", reads)) for _ in range(n - 1)]
    await asyncio.sleep(0)  # each of the rest runs to its first wait (a fill of its own would have counted)
    return [first, *rest]


async def test_concurrent_misses_of_a_key_share_one_fill() -> None:
    cache: InvalidatingCache[str, int] = InvalidatingCache(ttl=5, max_entries=10)
    reads = Reads()
    tasks = await misses(cache, reads, 16)
    reads.done.set()
    assert await asyncio.gather(*tasks) == [7] * 16
    assert reads.calls == 1 and cache.shared_fills == 15
    assert cache.get("a") == 7


async def test_a_miss_after_an_invalidation_does_not_join_the_fill_that_began_before_it() -> None:
    cache: InvalidatingCache[str, int] = InvalidatingCache(ttl=5, max_entries=10)
    reads = Reads()
    first = asyncio.create_task(cache.get_or_fill("a", reads))
    await reads.started.wait()
    cache.invalidate("a")  # a change committed (and heard) while the first request reads
    later = asyncio.create_task(cache.get_or_fill("a", reads))
    await asyncio.sleep(0)
    assert reads.calls == 2, "the later request reads for itself"
    reads.done.set()
    assert await asyncio.gather(first, later) == [7, 7]
    assert cache.shared_fills == 0


async def test_a_failed_fill_fails_only_its_own_request() -> None:
    cache: InvalidatingCache[str, int] = InvalidatingCache(ttl=5, max_entries=10)
    reads = Reads(fail_first=True)
    first, *rest = await misses(cache, reads, 4)
    reads.done.set()
    with pytest.raises(RuntimeError):
        await first
    assert await asyncio.gather(*rest) == [7, 7, 7]
    assert reads.calls >= 2 and cache.get("a") == 7


async def test_a_waiter_cancelled_leaves_the_fill_to_the_others() -> None:
    cache: InvalidatingCache[str, int] = InvalidatingCache(ttl=5, max_entries=10)
    reads = Reads()
    first, gone, other = await misses(cache, reads, 3)
    gone.cancel()
    await asyncio.sleep(0)
    reads.done.set()
    assert await asyncio.gather(first, other) == [7, 7]
    assert gone.cancelled() and reads.calls == 1


async def test_nothing_is_shared_while_the_cache_is_off() -> None:
    cache: InvalidatingCache[str, int] = InvalidatingCache(ttl=0, max_entries=10)
    reads = Reads()
    tasks = await misses(cache, reads, 3)
    reads.done.set()
    assert await asyncio.gather(*tasks) == [7, 7, 7]
    assert reads.calls == 3


def refreshing(now: list[float]) -> InvalidatingCache[str, int]:
    """ttl 5, refreshed in the last second of an entry's life; "a" is 7 from 100 until 105, and the clock then
    reads 104.5."""
    cache: InvalidatingCache[str, int] = InvalidatingCache(
        ttl=5, max_entries=10, clock=lambda: now[0], refresh_ahead=0.2
    )
    now[0] = 100.0
    assert cache.put("a", 7, cache.ticket("a"))
    now[0] = 104.5
    return cache


async def test_a_key_in_steady_use_is_read_again_in_the_background_before_it_expires() -> None:
    now = [0.0]
    cache = refreshing(now)
    reads = Reads(value=8)
    now[0] = 103.9
    assert await cache.get_or_fill("a", reads) == 7 and reads.calls == 0, "not yet in the entry's last fifth"
    now[0] = 104.2
    assert await cache.get_or_fill("a", reads) == 7, "served at once while the read is held open"
    await reads.started.wait()
    now[0] = 104.4
    assert await cache.get_or_fill("a", reads) == 7 and reads.calls == 1, "one refresh at a time"
    now[0] = 105.5  # the old entry has expired: this miss joins the refresh in flight
    joined = asyncio.create_task(cache.get_or_fill("a", reads))
    await asyncio.sleep(0)
    reads.done.set()
    assert await joined == 8 and reads.calls == 1
    now[0] = 110.4
    assert cache.get("a") == 8, "stored when the read ended, for a whole ttl"


async def test_a_refresh_that_read_before_an_invalidation_is_not_stored() -> None:
    now = [0.0]
    cache = refreshing(now)
    reads = Reads(value=8)
    assert await cache.get_or_fill("a", reads) == 7
    await reads.started.wait()
    cache.invalidate("a")  # a change committed (and heard) while the refresh reads
    reads.done.set()
    await reads.ended.wait()
    assert cache.get("a") is None


async def test_a_refresh_that_fails_leaves_the_entry_to_its_expiry_and_the_next_hit_tries_again(
    caplog: pytest.LogCaptureFixture,
) -> None:
    now = [0.0]
    cache = refreshing(now)
    reads = Reads(value=8, fail_first=True)
    reads.done.set()
    assert await cache.get_or_fill("a", reads) == 7
    await reads.ended.wait()
    assert cache.get("a") == 7 and "refreshing a cached entry failed" in caplog.text
    reads.ended.clear()
    assert await cache.get_or_fill("a", reads) == 7
    await reads.ended.wait()
    assert reads.calls == 2 and cache.get("a") == 8


async def test_a_refresh_that_finds_the_row_gone_drops_the_entry() -> None:
    now = [0.0]
    cache = refreshing(now)
    reads = Reads(value=None)
    reads.done.set()
    assert await cache.get_or_fill("a", reads) == 7
    await reads.ended.wait()
    assert cache.get("a") is None


async def test_closing_stops_the_refreshes_in_flight() -> None:
    now = [0.0]
    cache = refreshing(now)
    reads = Reads(value=8)
    assert await cache.get_or_fill("a", reads) == 7
    await reads.started.wait()
    await cache.close()
    reads.done.set()
    assert cache.get("a") == 7 and not reads.ended.is_set()
