"""The bus across processes: Redis pub/sub, over redis-py.

Publishes leave at once and are never waited for (`RedisPublisher`); listeners hear every message on their
prefixes through a pattern subscription each, and on the channels they follow through a subscription each
(`RedisListening`), and this process's own publishes before `publish` returns (core/bus.py's local listeners).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import redis.asyncio as aioredis
from redis.exceptions import RedisError

from core import jsontext
from core.bus import Listening, LocalListener, MessageListener, SentInOrder, Subscription, notify_listeners
from core.reconnect import Reconnecting
from core.redis_calls import REDIS_ANSWER_SECONDS, OrderedCalls
from core.redis_listening import RedisListening, pattern_of

log = logging.getLogger(__name__)


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
                self._early.append(jsontext.loads(raw["data"]))

    async def get(self, timeout: float | None = None) -> dict[str, Any] | None:
        if self._early:
            return self._early.pop(0)
        loop = asyncio.get_running_loop()
        deadline = None if timeout is None else loop.time() + timeout
        while True:
            remaining = None if deadline is None else max(0.0, deadline - loop.time())
            raw = await self._pubsub.get_message(ignore_subscribe_messages=True, timeout=remaining)
            if raw is not None:
                decoded: dict[str, Any] = jsontext.loads(raw["data"])
                return decoded
            if deadline is not None and loop.time() >= deadline:
                return None


class RedisPublisher:
    """PUBLISHes that leave in the order asked and that nobody waits for.

    A committing transaction does not wait for Redis: an agent step publishes several events, and their round
    trips were a third of a durable step on PostgreSQL (bench/README.md). What was published is written, as one
    write on a connection kept for the publisher (core/redis_calls.py), by `flush` in its caller's own step, or
    at the end of the turn for publishes nobody flushes. Redis answers none of them (a quiet connection: nobody
    would read the answers but to drop them), only a probe now and then that tells whether the connection still
    stands. While the connection is being made (first, or after a loss) batches queue for a task and leave, in
    order, once it is: a committer never waits for Redis.
    """

    def __init__(self, url: str) -> None:
        self._calls = OrderedCalls(url, REDIS_ANSWER_SECONDS, REDIS_ANSWER_SECONDS, quiet=True)
        self._pending: list[tuple[str, str | bytes]] = []
        self._queued = SentInOrder(self._send, "redis-publisher")
        self._published = False

    def publish(self, channel: str, payload: str | bytes) -> None:
        self._pending.append((channel, payload))
        if len(self._pending) == 1:
            asyncio.get_running_loop().call_soon(self._flush_later)

    def _flush_later(self) -> None:
        if self._pending:
            self._queued.put_all(self._take())

    def _take(self) -> list[tuple[str, str | bytes]]:
        batch, self._pending = self._pending, []
        return batch

    async def flush(self) -> None:
        """Write what was published so far now (see `Bus.flush`)."""
        if not self._pending:
            return
        if not (self._calls.connected and self._queued.idle):
            self._queued.put_all(self._take())  # after what is queued, and never waiting for a connection
            return
        await self._write(self._take())

    async def _send(self, batch: list[tuple[str, str | bytes]]) -> None:
        await self._write(batch)

    async def _write(self, batch: list[tuple[str, str | bytes]]) -> None:
        self._published = True
        try:
            probe = await self._calls.send_quiet([("PUBLISH", channel, payload) for channel, payload in batch])
        except (RedisError, OSError) as failed:
            _log_failed(len(batch), failed)
            return
        if probe is not None:
            probe.add_done_callback(_logged_if_lost)

    async def close(self, timeout: float = REDIS_ANSWER_SECONDS) -> None:
        """Send what was published so far (waiting at most `timeout` seconds), then let go of Redis."""
        self._flush_later()
        await self._queued.flush(timeout)
        if self._published:
            # Redis answers in order: once this is answered, everything published before it has left.
            handled = self._calls.handled()
            handled.add_done_callback(_retrieved)
            await asyncio.wait({handled}, timeout=timeout)
        await self._calls.close()


def _log_failed(count: int, failed: BaseException) -> None:
    # What is published is news of committed rows: a lost message costs latency (the poll catches up), or a
    # watcher finds the gap by seq.
    log.warning("publishing %d message(s) to Redis failed: %s", count, failed)


def _retrieved(answer: asyncio.Future[Any]) -> None:
    if not answer.cancelled():
        answer.exception()  # closing: a failure now is of no use, and one before it was logged as it happened


def _logged_if_lost(probe: asyncio.Future[Any]) -> None:
    if not probe.cancelled() and probe.exception() is not None:
        # What was published since the connection's last answered probe may not have reached Redis.
        log.warning("the connection publishing to Redis was lost: %s", probe.exception())


class RedisBus:
    """For many processes on many machines."""

    def __init__(self, url: str) -> None:
        self._url = url
        self._redis = aioredis.Redis.from_url(url)  # for `subscribe`, whose readers wait on one channel each
        self._publisher = RedisPublisher(url)
        self._listeners: list[LocalListener] = []
        self._listenings: list[RedisListening] = []

    @property
    def publisher(self) -> RedisPublisher:
        """For this process's other messages to Redis (the chat's): those of one commit then leave with the
        bus's in one write, on one connection. The bus closes it."""
        return self._publisher

    async def publish(self, channel: str, message: dict[str, Any]) -> None:
        """Heard in this process before this returns, and on its way to Redis (`RedisPublisher`)."""
        # Other processes hear it through Redis (and this one a second time, harmlessly).
        notify_listeners(self._listeners, channel, message)
        self._publisher.publish(channel, jsontext.dumps(message))

    async def flush(self) -> None:
        await self._publisher.flush()

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
        listening = RedisListening(
            self._url, listener, self._listeners, Reconnecting(name, meanwhile), [pattern_of(p) for p in prefixes]
        )
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
            await pubsub.aclose()

    async def close(self) -> None:
        await self._publisher.close()
        for listening in self._listenings:
            await listening.stop()
        self._listenings.clear()
        await self._redis.aclose()
