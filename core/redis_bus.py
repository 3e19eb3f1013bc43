"""The bus across processes: Redis pub/sub, over core/resp.py's client.

Publishes leave at once and are never waited for (`RedisPublisher`); listeners hear every message on their
prefixes through one pattern subscription each (`RedisListening`), and this process's own publishes before
`publish` returns (core/bus.py's local listeners).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import re
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import redis.asyncio as aioredis
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import RedisError

from core.bus import Listening, LocalListener, MessageListener, SentInOrder, Subscription, notify_listeners
from core.reconnect import Reconnecting
from core.resp import Reply, RespClient

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

    def flush(self) -> None:
        """Send now what was published in this turn of the event loop (see `Bus.flush`)."""
        self._client.flush()

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
        self._publisher.publish(channel, json.dumps(message, separators=(",", ":")))

    def flush(self) -> None:
        self._publisher.flush()

    def listen(
        self,
        prefixes: tuple[str, ...],
        on_message: MessageListener,
        on_reset: Callable[[], None],
        *,
        name: str = "a bus listener",
        meanwhile: str = "messages from other processes are missed",
    ) -> Listening:
        listener = LocalListener(prefixes, on_message, on_reset)
        self._listeners.append(listener)
        listening = RedisListening(self._url, listener, self._listeners, Reconnecting(name, meanwhile))
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
    calls `on_reset`, waits (core/reconnect.py: one warning, a doubling wait up to a cap, one line once back),
    and subscribes again (calling `on_reset` once more, for what was published while it was away). Messages are
    delivered as the connection reads them (core/resp.py's `on_push`): no task stands between Redis and the
    listener. A PING every few idle seconds finds a connection that died silently."""

    PING_SECONDS = 5.0

    def __init__(
        self, url: str, listener: LocalListener, local: list[LocalListener], reconnecting: Reconnecting
    ) -> None:
        self._url = url
        self._listener = listener
        self._local = local
        self._reconnecting = reconnecting
        self._healthy = False
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
        patterns = [_pattern(prefix) for prefix in self._listener.prefixes]
        while True:
            client = RespClient(self._url, REDIS_ANSWER_SECONDS, on_push=self._pushed)
            try:
                lost = await client.connect()
                for pattern in patterns:  # one command each: each answers one confirmation
                    await client.call(b"PSUBSCRIBE", pattern)
                self._healthy = True
                self._reconnecting.subscribed()
                self._listener.on_reset()  # whatever was published before this subscription was missed
                while True:
                    # Not wait_for: on 3.11 it swallows a cancel that comes as `lost` completes (a shutdown while
                    # Redis goes away), and this task then outlived its `stop`.
                    await asyncio.wait((lost,), timeout=self.PING_SECONDS)
                    if lost.done():
                        raise RedisConnectionError("its connection was closed")
                    await client.call(b"PING")
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # whatever it was, this task must live on: it is the listener
                self._healthy = False
                self._listener.on_reset()
                delay = self._reconnecting.failed(exc)
                await client.close()
                await asyncio.sleep(delay)
            finally:
                self._healthy = False
                await client.close()

    async def stop(self) -> None:
        if self._listener in self._local:
            self._local.remove(self._listener)
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._task
