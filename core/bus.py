"""The event bus: wake-ups and live events between processes, published after commit.

In-process by default; Redis pub/sub when VOUCH_REDIS_URL is set. The bus only carries
news of rows already committed, so a lost message costs latency, never data.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import re
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any, Generic, Protocol, TypeVar

import redis.asyncio as aioredis
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import RedisError

from core.resp import Reply, RespClient

log = logging.getLogger(__name__)

WAKE_CHANNEL = "vouch:wake"
# Invalidations of per-process caches that no event row announces (a revoked key, a webhook attempt, a
# deleted execution): see core/cache.py, core/auth_cache.py and api/status_cache.py.
CACHE_CHANNEL = "vouch:cache"

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
        """True while every message published from now on will be heard (subscribed and connected)."""

    async def stop(self) -> None: ...


class Bus(Protocol):
    async def publish(self, channel: str, message: dict[str, Any]) -> None: ...

    def subscribe(self, *channels: str) -> AbstractAsyncContextManager[Subscription]: ...

    def listen(
        self, prefixes: tuple[str, ...], on_message: MessageListener, on_reset: Callable[[], None]
    ) -> Listening:
        """Call `on_message` for every message on a channel with one of `prefixes`, from this process and
        (with Redis) every other. A message published in this process is heard before `publish` returns:
        a change committed here is known here by the time its request answers. `on_reset` is called
        whenever messages may have been missed (a lost connection, a resubscription)."""

    async def close(self) -> None: ...


class _LocalListener:
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


def _notify(listeners: list[_LocalListener], channel: str, message: dict[str, Any]) -> None:
    for listener in tuple(listeners):
        listener.deliver(channel, message)


class _InProcessListening:
    def __init__(self, listeners: list[_LocalListener], listener: _LocalListener) -> None:
        self._listeners = listeners
        self._listener = listener

    @property
    def healthy(self) -> bool:
        return self._listener in self._listeners

    async def stop(self) -> None:
        if self._listener in self._listeners:
            self._listeners.remove(self._listener)


class _QueueSubscription:
    def __init__(self) -> None:
        self.queue: asyncio.Queue[dict[str, Any]] = asyncio.Queue()

    async def get(self, timeout: float | None = None) -> dict[str, Any] | None:
        try:
            return await asyncio.wait_for(self.queue.get(), timeout)
        except TimeoutError:
            return None


class InProcessBus:
    """For one process: the embedded default."""

    def __init__(self) -> None:
        self._subscribers: dict[str, set[_QueueSubscription]] = {}
        self._listeners: list[_LocalListener] = []

    async def publish(self, channel: str, message: dict[str, Any]) -> None:
        for sub in tuple(self._subscribers.get(channel, ())):
            sub.queue.put_nowait(message)
        _notify(self._listeners, channel, message)

    def listen(
        self, prefixes: tuple[str, ...], on_message: MessageListener, on_reset: Callable[[], None]
    ) -> Listening:
        listener = _LocalListener(prefixes, on_message, on_reset)
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


class _RedisSubscription:
    def __init__(self, pubsub: Any) -> None:
        self._pubsub = pubsub
        self._early: list[dict[str, Any]] = []

    async def confirm(self, channels: tuple[str, ...], timeout: float = 10.0) -> None:
        """Wait until Redis acknowledges every SUBSCRIBE: only then is nothing published missed,
        which is what lets a reader subscribe first and replay from the database second."""
        waiting = set(channels)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while waiting:
            remaining = deadline - loop.time()
            if remaining <= 0:
                raise TimeoutError(f"Redis did not confirm the subscription to {sorted(waiting)}")
            raw = await self._pubsub.get_message(ignore_subscribe_messages=False, timeout=remaining)
            if raw is None:
                continue
            if raw["type"] == "subscribe":
                channel = raw["channel"]
                waiting.discard(channel.decode() if isinstance(channel, bytes) else channel)
            elif raw["type"] == "message":
                self._early.append(json.loads(raw["data"]))

    async def get(self, timeout: float | None = None) -> dict[str, Any] | None:
        if self._early:
            return self._early.pop(0)
        loop = asyncio.get_running_loop()
        deadline = None if timeout is None else loop.time() + timeout
        while True:
            remaining = None if deadline is None else max(0.0, deadline - loop.time())
            raw = await self._pubsub.get_message(ignore_subscribe_messages=True, timeout=remaining)
            if raw is not None:
                decoded: dict[str, Any] = json.loads(raw["data"])
                return decoded
            if deadline is not None and loop.time() >= deadline:
                return None


T = TypeVar("T")


class SentInOrder(Generic[T]):
    """Items handed over now and sent later, in order, by a task of its own: what was put while a send was under
    way leaves, as one batch, with the next. Whoever puts never waits; `send_batch` handles its own failures."""

    def __init__(self, send_batch: Callable[[list[T]], Awaitable[None]], name: str) -> None:
        self._send_batch = send_batch
        self._name = name
        self._waiting: list[T] = []
        self._sending: asyncio.Task[None] | None = None

    def put(self, item: T) -> None:
        self._waiting.append(item)
        if self._sending is None or self._sending.done():
            self._sending = asyncio.create_task(self._send(), name=self._name)

    @property
    def idle(self) -> bool:
        """Nothing waits to be sent, and no send is under way."""
        return not self._waiting and (self._sending is None or self._sending.done())

    async def _send(self) -> None:
        while self._waiting:
            batch, self._waiting = self._waiting, []
            await self._send_batch(batch)

    async def flush(self, timeout: float) -> None:
        """Wait, at most `timeout` seconds, until what was put so far has been sent (or failed to be)."""
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout):
                while self._sending is not None and not self._sending.done():
                    await asyncio.wait({self._sending})


# How long Redis may take to answer a publish, a subscription or a ping before its connection counts as lost.
REDIS_ANSWER_SECONDS = 5.0


def _logged_if_failed(reply: asyncio.Future[Reply]) -> None:
    if reply.cancelled():
        return
    failure = reply.exception() or reply.result()
    if isinstance(failure, BaseException):
        # What is published is news of committed rows: a lost message costs latency (the poll catches up), or
        # a watcher finds the gap by seq.
        log.warning("publishing to Redis failed: %s", failure)


class RedisPublisher:
    """PUBLISHes that leave in the order asked and that nobody waits for.

    A committing transaction does not wait for Redis: an agent step publishes several events, and their round
    trips were a third of a durable step on PostgreSQL (bench/README.md). Each publish is written at once on a
    connection of its own, and all those asked in one turn of the event loop leave in one write (core/resp.py).
    While the connection is being made, they queue and leave, in order, once it is.
    """

    def __init__(self, url: str) -> None:
        self._client = RespClient(url, REDIS_ANSWER_SECONDS)
        self._queued = SentInOrder(self._send, "redis-publisher")
        self._last: asyncio.Future[Reply] | None = None

    def publish(self, channel: str, payload: str | bytes) -> None:
        if self._client.connected and self._queued.idle:
            self._last = self._client.send_now(b"PUBLISH", channel, payload)
            self._last.add_done_callback(_logged_if_failed)
        else:
            self._queued.put((channel, payload))

    async def _send(self, batch: list[tuple[str, str | bytes]]) -> None:
        try:
            await self._client.connect()
        except (RedisError, OSError) as failed:
            log.warning("publishing %d message(s) to Redis failed: %s", len(batch), failed)
            return
        sent = [self._client.send_now(b"PUBLISH", channel, payload) for channel, payload in batch]
        for reply in sent:
            reply.add_done_callback(_logged_if_failed)
        self._last = sent[-1]
        await asyncio.wait(sent)

    async def close(self, timeout: float = REDIS_ANSWER_SECONDS) -> None:
        """Send what was published so far (waiting at most `timeout` seconds), then let go of Redis."""
        await self._queued.flush(timeout)
        if self._last is not None:
            # Redis answers in order: once the last publish is answered, every earlier one has left.
            await asyncio.wait({self._last}, timeout=timeout)
        await self._client.close()


class RedisBus:
    """For many processes on many machines."""

    def __init__(self, url: str) -> None:
        self._url = url
        self._redis = aioredis.Redis.from_url(url)  # for `subscribe`, whose readers wait on one channel each
        self._publisher = RedisPublisher(url)
        self._listeners: list[_LocalListener] = []
        self._listenings: list[RedisListening] = []

    async def publish(self, channel: str, message: dict[str, Any]) -> None:
        """Heard in this process before this returns, and on its way to Redis (`RedisPublisher`)."""
        # Other processes hear it through Redis (and this one a second time, harmlessly).
        _notify(self._listeners, channel, message)
        self._publisher.publish(channel, json.dumps(message, separators=(",", ":")))

    def listen(
        self, prefixes: tuple[str, ...], on_message: MessageListener, on_reset: Callable[[], None]
    ) -> Listening:
        listener = _LocalListener(prefixes, on_message, on_reset)
        self._listeners.append(listener)
        listening = RedisListening(self._url, listener, self._listeners)
        self._listenings.append(listening)
        return listening

    @asynccontextmanager
    async def subscribe(self, *channels: str) -> AsyncIterator[Subscription]:
        pubsub = self._redis.pubsub()
        try:
            await pubsub.subscribe(*channels)
            subscription = _RedisSubscription(pubsub)
            await subscription.confirm(channels)
            yield subscription
        finally:
            await pubsub.unsubscribe()
            await pubsub.aclose()  # type: ignore[no-untyped-call]

    async def close(self) -> None:
        await self._publisher.close()
        for listening in self._listenings:
            await listening.stop()
        self._listenings.clear()
        await self._redis.aclose()


def _pattern(prefix: str) -> str:
    return re.sub(r"([*?\[\]\\])", r"\\\1", prefix) + "*"


class RedisListening:
    """One pattern subscription per listener on a connection of its own, kept up by a task: on any failure it
    calls `on_reset`, waits, and subscribes again (calling `on_reset` once more, for what was published while it
    was away). Messages are delivered as the connection reads them (core/resp.py's `on_push`): no task stands
    between Redis and the listener. A PING every few idle seconds finds a connection that died silently."""

    RETRY_SECONDS = (0.1, 0.5, 1.0, 2.0, 5.0)
    PING_SECONDS = 5.0

    def __init__(self, url: str, listener: _LocalListener, local: list[_LocalListener]) -> None:
        self._url = url
        self._listener = listener
        self._local = local
        self._healthy = False
        self._client: RespClient | None = None
        self._task = asyncio.create_task(self._run(), name="bus-listener")

    @property
    def healthy(self) -> bool:
        return self._healthy

    def _pushed(self, parts: list[Any]) -> None:
        if len(parts) != 4 or parts[0] != b"pmessage":
            return
        try:
            channel, message = parts[2].decode(), json.loads(parts[3])
        except ValueError:  # not UTF-8, or not JSON: not one of ours
            log.warning("bus listener: a message on %r is not JSON", parts[2])
            return
        self._listener.deliver(channel, message)

    async def _run(self) -> None:
        failures = 0
        patterns = [_pattern(prefix) for prefix in self._listener.prefixes]
        while True:
            client = self._client = RespClient(self._url, REDIS_ANSWER_SECONDS, on_push=self._pushed)
            try:
                lost = await client.connect()
                for pattern in patterns:  # one command each: each answers one confirmation
                    await client.call(b"PSUBSCRIBE", pattern)
                self._healthy = True
                failures = 0
                self._listener.on_reset()  # whatever was published before this subscription was missed
                while True:
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(asyncio.shield(lost), self.PING_SECONDS)
                    if lost.done():
                        raise RedisConnectionError("the bus listener's connection to Redis was lost")
                    await client.call(b"PING")
            except asyncio.CancelledError:
                raise
            except (RedisError, OSError, TimeoutError, ValueError) as exc:
                if self._healthy or failures == 0:
                    log.warning("bus listener lost Redis (%s); caches are cleared and bypassed until it is back", exc)
                self._healthy = False
                self._listener.on_reset()
                await asyncio.sleep(self.RETRY_SECONDS[min(failures, len(self.RETRY_SECONDS) - 1)])
                failures += 1
            finally:
                self._healthy = False
                await client.close()

    async def stop(self) -> None:
        if self._listener in self._local:
            self._local.remove(self._listener)
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._task


def make_bus(redis_url: str | None) -> Bus:
    return RedisBus(redis_url) if redis_url else InProcessBus()
