"""core/cache.py: LRU and TTL bounds, and fills that lose to an invalidation made while they read."""

from __future__ import annotations

from core.cache import InvalidatingCache


def test_a_fill_that_read_before_an_invalidation_is_not_stored() -> None:
    cache: InvalidatingCache[str, int] = InvalidatingCache(ttl=5, max_entries=10)
    ticket = cache.ticket()  # the fill starts reading...
    cache.invalidate("a")  # ...the row changes and the bus says so...
    assert not cache.put("a", 1, ticket)  # ...so what it read is stale
    assert cache.get("a") is None
    assert cache.put("a", 2, cache.ticket()) and cache.get("a") == 2
    ticket = cache.ticket()
    cache.clear()
    assert not cache.put("b", 1, ticket)


def test_entries_expire_and_the_least_recently_used_goes_first() -> None:
    now = [100.0]
    cache: InvalidatingCache[str, int] = InvalidatingCache(ttl=5, max_entries=2, clock=lambda: now[0])
    cache.put("a", 1, cache.ticket())
    cache.put("b", 2, cache.ticket())
    assert cache.get("a") == 1
    cache.put("c", 3, cache.ticket())  # "b" was used least recently
    assert cache.get("b") is None and cache.get("a") == 1 and cache.get("c") == 3
    now[0] += 5
    assert cache.get("a") is None and len(cache) == 1


def test_nothing_is_stored_while_the_bus_cannot_be_heard_or_with_a_ttl_of_zero() -> None:
    cache: InvalidatingCache[str, int] = InvalidatingCache(ttl=5, max_entries=2)
    cache.hearing = lambda: False
    assert not cache.put("a", 1, cache.ticket())
    off: InvalidatingCache[str, int] = InvalidatingCache(ttl=0, max_entries=2)
    assert not off.put("a", 1, off.ticket()) and off.get("a") is None
