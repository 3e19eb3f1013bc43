"""The event bus: wake-ups and live events between processes, published after commit.

In-process by default; Redis pub/sub when VOUCH_REDIS_URL is set. The bus only carries
news of rows already committed, so a lost message costs latency, never data.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any, Generic, Protocol, TypeVar

log = logging.getLogger(__name__)

WAKE_CHANNEL = "vouch:wake"
# Invalidations of per-process caches that no event row announces (a revoked key, a webhook attempt, a
# deleted execution): see core/cache.py, core/auth_cache.py and api/status_cache.py.
CACHE_CHANNEL = "vouch:cache"
# A suite's run ended, or a suite was created: the workers' suite schedulers start pending runs
# (agents/suite_scheduler.py).
SUITE_CHANNEL = "vouch:suites"

# A listener hears (channel, message) for every message on a channel starting with one of its prefixes.
MessageListener = Callable[[str, dict[str, Any]], None]


EXECUTION_CHANNEL_PREFIX = "vouch:execution:"


def execution_channel(execution_id: str) -> str:
    return f"{EXECUTION_CHANNEL_PREFIX}{execution_id}"


class Subscription(Protocol):
    async def get(self, timeout: float | None = None) -> dict[str, Any] | None:
        """The next message, or None once `timeout` seconds pass without one."""


class Listening(Protocol):
    @property
    def healthy(self) -> bool:
        """True while every message published from now on on its prefixes will be heard (subscribed and
        connected)."""

    def follow(self, channel: str) -> bool:
        """Hear `channel`, one under the listener's `followed` prefixes, until `unfollow`. True once every message
        published on it from now on will be heard (its subscription confirmed); False until then."""

    def unfollow(self, channel: str) -> None: ...

    async def stop(self) -> None: ...


class Bus(Protocol):
    async def publish(self, channel: str, message: dict[str, Any]) -> None: ...

    async def flush(self) -> None:
        """Send what was published so far now, not after the rest of the caller's turn of the event loop: a
        committer's messages are then on their way before it builds and logs its answer."""

    def subscribe(self, *channels: str) -> AbstractAsyncContextManager[Subscription]: ...

    def listen(
        self,
        prefixes: tuple[str, ...],
        on_message: MessageListener,
        on_reset: Callable[[], None],
        *,
        followed: tuple[str, ...] = (),
        name: str = "a bus listener",
        meanwhile: str = "messages from other processes are missed",
    ) -> Listening:
        """Call `on_message` for every message on a channel with one of `prefixes`, from this process and
        (with Redis) every other. A message published in this process is heard before `publish` returns:
        a change committed here is known here by the time its request answers. `on_reset` is called
        whenever messages may have been missed (a lost connection, a resubscription). The listener keeps
        its subscription up by itself (core/reconnect.py); `name` and `meanwhile` are what its one warning
        says when Redis is lost.

        A channel under one of `followed` is heard from this process always, and from other processes only
        while `Listening.follow` holds it: a process that needs the news of a few executions does not decode
        every commit's."""

    async def close(self) -> None: ...


class LocalListener:
    """Synchronous delivery to listeners in the publishing process (both buses)."""

    def __init__(self, prefixes: tuple[str, ...], on_message: MessageListener, on_reset: Callable[[], None]) -> None:
        self.prefixes = prefixes
        self.on_message = on_message
        self.on_reset = on_reset

    def deliver(self, channel: str, message: dict[str, Any]) -> None:
        if channel.startswith(self.prefixes):
            try:
                self.on_message(channel, message)
            except Exception:
                log.warning("bus listener failed on %s", channel, exc_info=True)


def notify_listeners(listeners: list[LocalListener], channel: str, message: dict[str, Any]) -> None:
    for listener in tuple(listeners):
        listener.deliver(channel, message)


class _InProcessListening:
    def __init__(self, listeners: list[LocalListener], listener: LocalListener) -> None:
        self._listeners = listeners
        self._listener = listener

    @property
    def healthy(self) -> bool:
        return self._listener in self._listeners

    def follow(self, channel: str) -> bool:
        return self.healthy  # every publish is this process's

    def unfollow(self, channel: str) -> None:
        pass

    async def stop(self) -> None:
        if self._listener in self._listeners:
            self._listeners.remove(self._listener)


class _QueueSubscription:
    def __init__(self) -> None:
        self.queue: asyncio.Queue[dict[str, Any]] = asyncio.Queue()

    async def get(self, timeout: float | None = None) -> dict[str, Any] | None:
        if timeout is not None and timeout <= 0:
            # What is queued already. (wait_for with no time left gives up before queue.get has even run.)
            return None if self.queue.empty() else self.queue.get_nowait()
        try:
            return await asyncio.wait_for(self.queue.get(), timeout)
        except TimeoutError:
            return None


class InProcessBus:
    """For one process: the embedded default."""

    def __init__(self) -> None:
        self._subscribers: dict[str, set[_QueueSubscription]] = {}
        self._listeners: list[LocalListener] = []

    async def publish(self, channel: str, message: dict[str, Any]) -> None:
        for sub in tuple(self._subscribers.get(channel, ())):
            sub.queue.put_nowait(message)
        notify_listeners(self._listeners, channel, message)

    async def flush(self) -> None:
        pass  # delivered as published

    def listen(
        self,
        prefixes: tuple[str, ...],
        on_message: MessageListener,
        on_reset: Callable[[], None],
        *,
        followed: tuple[str, ...] = (),
        name: str = "a bus listener",
        meanwhile: str = "messages from other processes are missed",
    ) -> Listening:
        listener = LocalListener((*prefixes, *followed), on_message, on_reset)
        self._listeners.append(listener)
        return _InProcessListening(self._listeners, listener)

    @asynccontextmanager
    async def subscribe(self, *channels: str) -> AsyncIterator[Subscription]:
        sub = _QueueSubscription()
        for channel in channels:
            self._subscribers.setdefault(channel, set()).add(sub)
        try:
            yield sub
        finally:
            for channel in channels:
                subs = self._subscribers.get(channel)
                if subs is not None:
                    subs.discard(sub)
                    if not subs:
                        del self._subscribers[channel]

    async def close(self) -> None:
        self._subscribers.clear()
        self._listeners.clear()


T = TypeVar("T")


class SentInOrder(Generic[T]):
    """Items handed over now and sent later, in order, by a task of its own: what was put while a send was under
    way leaves, as one batch, with the next. Whoever puts never waits; `send_batch` handles its own failures.

    With `spacing` (seconds), a batch leaves no sooner than that after the one before it began, gathering what is
    put meanwhile: the first leaves at once, and `flush` sends what waits without waiting out the spacing.
    """

    def __init__(self, send_batch: Callable[[list[T]], Awaitable[None]], name: str, *, spacing: float = 0.0) -> None:
        self._send_batch = send_batch
        self._name = name
        self._spacing = spacing
        self._waiting: list[T] = []
        self._sending: asyncio.Task[None] | None = None
        self._last_sent = float("-inf")
        self._hurry = asyncio.Event()

    def put(self, item: T) -> None:
        self.put_all([item])

    def put_all(self, items: list[T]) -> None:
        self._waiting.extend(items)
        if self._sending is None or self._sending.done():
            self._sending = asyncio.create_task(self._send(), name=self._name)

    @property
    def idle(self) -> bool:
        """Nothing waits to be sent, and no send is under way."""
        return not self._waiting and (self._sending is None or self._sending.done())

    async def _send(self) -> None:
        loop = asyncio.get_running_loop()
        try:
            while self._waiting:
                early = self._last_sent + self._spacing - loop.time()
                if early > 0 and not self._hurry.is_set():
                    with contextlib.suppress(TimeoutError):
                        async with asyncio.timeout(early):
                            await self._hurry.wait()
                batch, self._waiting = self._waiting, []
                self._last_sent = loop.time()
                await self._send_batch(batch)
        finally:
            self._hurry.clear()

    async def flush(self, timeout: float) -> None:
        """Wait, at most `timeout` seconds, until what was put so far has been sent (or failed to be)."""
        if not self.idle:
            self._hurry.set()
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout):
                while self._sending is not None and not self._sending.done():
                    await asyncio.wait({self._sending})


def make_bus(redis_url: str | None) -> Bus:
    if not redis_url:
        return InProcessBus()
    # A circle broken at run time: redis_bus builds on this module's Bus, and only a Redis URL needs it.
    from core.redis_bus import RedisBus

    return RedisBus(redis_url)
