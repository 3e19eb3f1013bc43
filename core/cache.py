"""A small per-process cache for data the bus says when to forget: LRU-bounded, TTL-bounded, race-safe fills.

The web process caches what every API request would otherwise read from the database (the API key behind a
bearer token, an execution's status record). Those rows change in other transactions and other processes; each
change publishes an invalidation on the bus after its commit (core/bus.py `listen`). Three things keep a cached
value honest:

- **invalidation**: `invalidate(key)` (or `clear()`) when the bus says the rows changed;
- **tickets**: a fill reads the database, then stores. An invalidation that lands between the read and the store
  would be lost (the entry did not exist yet to be dropped), so a fill takes a `ticket(key)` before reading and
  `put` refuses the value if its key was invalidated (or the cache cleared) since;
- **age**: every entry is dropped `ttl` seconds after its fill, whatever the bus said: the bound on staleness
  for a change this process could not hear (another process's bus, a Redis outage, a half-open connection).

`hearing()` is False while the bus listener is not subscribed: nothing is stored then, so a process that cannot
hear invalidations reads the database every time instead of trusting what it might miss. `follows(key)` is the
same question for one key, where a process hears only the keys it asks for (api/status_cache.py): a ticket
records the answer, and a fill whose key was not heard yet when it began reads without storing. A TTL of 0
disables the cache entirely.

With `refresh_ahead`, a key in steady use does not expire under its requests: a hit in the last part of an
entry's life serves the entry and starts a fill of the key in the background moments later, as a miss would
(same ticket, same refusal after an invalidation), so that no request waits for the read (an API key's entry, read
before every request: one decision in fifty at ten a second waited for it, the slowest 2 %; bench/README.md, issue
25). An entry is still never served older than `ttl`.

`get_or_fill` shares one fill among the requests that miss one key at the same time. An entry of a key in
steady use expires under all of that key's requests in flight at once (a CI script polling with one API key
over 16 connections: 16 reads of the same row, on SQLite each through a connection of its own, 100-440 ms for
all of them, every `ttl` seconds; bench/README.md). A request joins a fill only if its key was not invalidated
since the fill began: what a request may be handed is never older than what it could have read itself.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Generic, TypeVar

log = logging.getLogger(__name__)

# How long after the hit that calls for it a refresh begins: not while that request still runs on the loop (begun
# at once, the read lengthened each one that called for it: at ten approvals a second, one request in fifty was
# still 2-4 ms slower; bench/README.md). The window it has (`refresh_ahead` of the ttl: a second for the API-key
# cache) is far longer, and a miss that comes meanwhile joins the refresh.
REFRESH_AFTER_SECONDS = 0.05

K = TypeVar("K")
V = TypeVar("V")


@dataclass(frozen=True)
class Ticket:
    generation: int
    # Whether the key's invalidations were heard when the ticket was taken.
    heard: bool


class InvalidatingCache(Generic[K, V]):
    """Not thread-safe: used from one event loop, where no await separates a read from its write."""

    def __init__(
        self, ttl: float, max_entries: int, clock: Callable[[], float] = time.monotonic, *, refresh_ahead: float = 0.0
    ) -> None:
        """`refresh_ahead`: the last fraction of an entry's life in which a hit refills it in the background
        (`get_or_fill`), 0 for none; the fills given to `get_or_fill` must then read apart from their caller."""
        if ttl < 0 or max_entries < 1 or not 0 <= refresh_ahead < 1:
            raise ValueError("a cache needs ttl >= 0, max_entries >= 1 and 0 <= refresh_ahead < 1")
        self.ttl = ttl
        self._refresh_within = ttl * refresh_ahead
        self._refreshes: set[asyncio.Task[None]] = set()
        self.max_entries = max_entries
        # Whether invalidations reach this process now (the bus listener's health); set by whoever wires it.
        self.hearing: Callable[[], bool] = lambda: True
        # Whether one key's invalidations reach this process from now on (asking for them if need be).
        self.follows: Callable[[K], bool] = lambda key: True
        self._clock = clock
        self._entries: OrderedDict[K, tuple[float, V]] = OrderedDict()
        # Bumped by every invalidation; a ticket older than a key's last invalidation cannot store it.
        self._generation = 0
        self._cleared_at = 0
        # Only keys invalidated while a fill of them may be in flight need remembering; bounded below.
        self._invalidated_at: OrderedDict[K, int] = OrderedDict()
        # Fills in progress by key, with the ticket each took; resolved with (True, value), or (False, None) when
        # the fill failed, whose waiters then fill for themselves.
        self._fills: dict[K, tuple[Ticket, asyncio.Future[tuple[bool, V | None]]]] = {}
        self.hits = 0
        self.misses = 0
        self.shared_fills = 0

    @property
    def active(self) -> bool:
        return self.ttl > 0 and self.hearing()

    def get(self, key: K) -> V | None:
        found = self._live(key)
        return None if found is None else found[1]

    def _live(self, key: K) -> tuple[float, V] | None:
        """The entry of `key` and when it expires, unless it has; counted as a hit or a miss."""
        found = self._entries.get(key)
        if found is None:
            self.misses += 1
            return None
        if self._clock() >= found[0]:
            del self._entries[key]
            self.misses += 1
            return None
        self._entries.move_to_end(key)
        self.hits += 1
        return found

    def ticket(self, key: K) -> Ticket:
        """Take before reading what `put` will store under `key`."""
        return Ticket(self._generation, self.active and self.follows(key))

    def unchanged_since(self, key: K, ticket: Ticket) -> bool:
        """Whether nothing invalidated `key` (or cleared the cache) since `ticket` was taken."""
        return ticket.generation >= self._cleared_at and self._invalidated_at.get(key, -1) <= ticket.generation

    def put(self, key: K, value: V, ticket: Ticket) -> bool:
        """Store `value` unless the cache is off, `key` was not heard when `ticket` was taken or was invalidated
        since; True if stored."""
        if not (self.active and ticket.heard) or not self.unchanged_since(key, ticket):
            return False
        self._entries[key] = (self._clock() + self.ttl, value)
        self._entries.move_to_end(key)
        while len(self._entries) > self.max_entries:
            self._entries.popitem(last=False)
        return True

    async def get_or_fill(self, key: K, fill: Callable[[], Awaitable[V | None]]) -> V | None:
        """The cached value of `key`, or else what `fill()` reads (stored unless None or invalidated meanwhile).
        A miss while another fill of `key` is in progress, and `key` unchanged since it began, waits for that
        fill instead of reading too. A fill's exception is its caller's alone: a waiter then fills itself. A hit in
        the entry's last `refresh_ahead` of life also starts a fill in the background, unless one is in progress."""
        found = self._live(key)
        if found is not None:
            expires, cached = found
            due = self._refresh_within and self._clock() >= expires - self._refresh_within
            if due and key not in self._fills and self.active:
                self._refresh(key, fill)
            return cached
        flight = self._fills.get(key) if self.active else None
        if flight is not None and self.unchanged_since(key, flight[0]):
            # Shielded: a waiter cancelled (its client gone) must not cancel the fill the others wait for.
            filled, value = await asyncio.shield(flight[1])
            if filled:
                self.shared_fills += 1
                return value
        ticket = self.ticket(key)
        result = self._fill_begins(key, ticket, joinable=self.active)
        try:
            value = await fill()
            if value is not None:
                self.put(key, value, ticket)
            result.set_result((True, value))
            return value
        finally:
            self._fill_ends(key, result)

    def _fill_begins(self, key: K, ticket: Ticket, *, joinable: bool) -> asyncio.Future[tuple[bool, V | None]]:
        """The answer of a fill of `key` that begins now, which the misses of `key` meanwhile may wait for if
        `joinable`; `_fill_ends` once it has read."""
        result: asyncio.Future[tuple[bool, V | None]] = asyncio.get_running_loop().create_future()
        if joinable:
            self._fills[key] = (ticket, result)
        return result

    def _fill_ends(self, key: K, result: asyncio.Future[tuple[bool, V | None]]) -> None:
        # Not answered by now, the fill failed: whoever waits for it reads for themselves.
        if not result.done():
            result.set_result((False, None))
        if self._fills.get(key, (None, None))[1] is result:
            del self._fills[key]

    def _refresh(self, key: K, fill: Callable[[], Awaitable[V | None]]) -> None:
        ticket = self.ticket(key)
        result = self._fill_begins(key, ticket, joinable=True)  # now: a hit meanwhile starts no other

        async def refill() -> None:
            try:
                await asyncio.sleep(REFRESH_AFTER_SECONDS)
                value = await fill()
                if value is None:
                    self.invalidate(key)  # gone from the database: the next request finds that out for itself
                else:
                    self.put(key, value, ticket)
                result.set_result((True, value))
            except Exception as failed:
                # The entry stays until it expires; the first request after that reads for itself, and fails
                # itself if the database still does.
                log.warning("refreshing a cached entry failed: %s", failed)
            finally:
                self._fill_ends(key, result)

        task = asyncio.get_running_loop().create_task(refill(), name="cache-refresh")
        self._refreshes.add(task)
        task.add_done_callback(self._refreshes.discard)

    async def close(self) -> None:
        """Stop the refreshes in progress (before what they read from goes away)."""
        for task in self._refreshes:
            task.cancel()
        await asyncio.gather(*self._refreshes, return_exceptions=True)

    def invalidate(self, key: K) -> None:
        self._entries.pop(key, None)
        self._generation += 1
        self._invalidated_at[key] = self._generation
        self._invalidated_at.move_to_end(key)
        # A fill's read takes milliseconds; once this many later invalidations have happened, forgetting the
        # oldest costs at most one fill's refusal being missed for a key invalidated that long ago. To stay
        # exact anyway, a forgotten key raises the floor every older ticket must clear.
        while len(self._invalidated_at) > 4 * self.max_entries:
            _, generation = self._invalidated_at.popitem(last=False)
            self._cleared_at = max(self._cleared_at, generation)

    def invalidate_where(self, matches: Callable[[K, V], bool]) -> int:
        """Invalidate every entry whose key and value match (e.g. all keys of one owner); how many."""
        doomed = [key for key, (_, value) in self._entries.items() if matches(key, value)]
        for key in doomed:
            self.invalidate(key)
        # Entries not cached now may be being filled: those fills must not store what they read either.
        self._generation += 1
        self._cleared_at = self._generation
        return len(doomed)

    def clear(self) -> None:
        """Forget everything, and refuse every fill that started before now."""
        self._entries.clear()
        self._invalidated_at.clear()
        self._generation += 1
        self._cleared_at = self._generation

    def __len__(self) -> int:
        return len(self._entries)
