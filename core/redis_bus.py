"""The bus across processes: Redis pub/sub, over redis-py.

Publishes leave at once and are never waited for (`RedisPublisher`); listeners hear every message on their
prefixes through a pattern subscription each, and on the channels they follow through a subscription each
(`RedisListening`), and this process's own publishes before `publish` returns (core/bus.py's local listeners).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import logging
import re
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import redis.asyncio as aioredis
from redis.asyncio.client import PubSub
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import RedisError

from core.bus import Listening, LocalListener, MessageListener, SentInOrder, Subscription, notify_listeners
from core.reconnect import Reconnecting
from core.redis_calls import OrderedCalls

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


def redis_client(
    url: str, timeout: float | None = REDIS_ANSWER_SECONDS, *, connect_timeout: float = REDIS_ANSWER_SECONDS
) -> aioredis.Redis:
    """redis-py's client for `url` (redis://, rediss://, unix://…?db=N; `?client_name=` names its connections), with
    redis-py's own retries off: each caller here has its own answer to a lost connection (a listener resubscribes
    and says so, the rate limiter falls back per process), and retries would hide the loss or stretch a timeout."""
    return aioredis.Redis.from_url(
        url, socket_timeout=timeout, socket_connect_timeout=connect_timeout, retry=Retry(NoBackoff(), 0)
    )


class RedisPublisher:
    """PUBLISHes that leave in the order asked and that nobody waits for.

    A committing transaction does not wait for Redis: an agent step publishes several events, and their round
    trips were a third of a durable step on PostgreSQL (bench/README.md). What was published is written, as one
    write on a connection kept for the publisher (core/redis_calls.py), by `flush` in its caller's own step, or
    at the end of the turn for publishes nobody flushes; their answers are read by the connection's task. While
    the connection is being made (first, or after a loss) batches queue for a task and leave, in order, once
    it is: a committer never waits for Redis.
    """

    def __init__(self, url: str) -> None:
        self._calls = OrderedCalls(url, REDIS_ANSWER_SECONDS, REDIS_ANSWER_SECONDS)
        self._pending: list[tuple[str, str | bytes]] = []
        self._queued = SentInOrder(self._send, "redis-publisher")
        self._last: asyncio.Future[Any] | None = None

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
        try:
            answers = await self._calls.send([("PUBLISH", channel, payload) for channel, payload in batch])
        except (RedisError, OSError) as failed:
            _log_failed(len(batch), failed)
            return
        for answer in answers[:-1]:
            answer.add_done_callback(_retrieved)
        answers[-1].add_done_callback(functools.partial(_logged_if_failed, len(batch)))
        self._last = answers[-1]

    async def close(self, timeout: float = REDIS_ANSWER_SECONDS) -> None:
        """Send what was published so far (waiting at most `timeout` seconds), then let go of Redis."""
        self._flush_later()
        await self._queued.flush(timeout)
        if self._last is not None:
            # Redis answers in order: once the last publish is answered, every earlier one has left.
            await asyncio.wait({self._last}, timeout=timeout)
        await self._calls.close()


def _log_failed(count: int, failed: BaseException) -> None:
    # What is published is news of committed rows: a lost message costs latency (the poll catches up), or a
    # watcher finds the gap by seq.
    log.warning("publishing %d message(s) to Redis failed: %s", count, failed)


def _retrieved(answer: asyncio.Future[Any]) -> None:
    if not answer.cancelled():
        answer.exception()  # the batch's last answer says whether it failed


def _logged_if_failed(count: int, answer: asyncio.Future[Any]) -> None:
    if not answer.cancelled() and answer.exception() is not None:
        _log_failed(count, answer.exception() or RedisError())


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
            self._url, listener, self._listeners, Reconnecting(name, meanwhile), [_pattern(p) for p in prefixes]
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
    """One pattern subscription per listener prefix, and one channel subscription per followed channel, on a
    connection of its own, kept up by a task: on any failure it calls `on_reset`, waits (core/reconnect.py: one
    warning, a doubling wait up to a cap, one line once back), and subscribes again (calling `on_reset` once more,
    for what was published while it was away). The task delivers each message as it reads it. A PING after a few
    idle seconds, unanswered a few seconds more, finds a connection that died silently.

    A followed channel counts as heard once Redis has answered its SUBSCRIBE on the current connection, and no
    UNSUBSCRIBE was sent since: `follow` says so to whoever must not trust what it read before that (a cache).
    """

    PING_SECONDS = 5.0

    def __init__(
        self,
        url: str,
        listener: LocalListener,
        local: list[LocalListener],
        reconnecting: Reconnecting,
        patterns: list[str],
    ) -> None:
        self._url = url
        self._listener = listener
        self._local = local
        self._reconnecting = reconnecting
        self._patterns = patterns
        self._healthy = False
        # Channels to hear; of those, what the current connection was asked to subscribe (and not since to
        # unsubscribe), its SUBSCRIBEs not answered yet by channel, and those answered.
        self._followed: set[str] = set()
        self._asked: set[str] = set()
        self._unanswered: dict[str, int] = {}
        self._confirmed: set[str] = set()
        self._pubsub: PubSub | None = None
        self._syncing: asyncio.Task[None] | None = None
        self._task = asyncio.create_task(self._run(), name="bus-listener")

    @property
    def healthy(self) -> bool:
        return self._healthy

    def follow(self, channel: str) -> bool:
        if channel not in self._followed:
            self._followed.add(channel)
            self._sync_soon()
        return self._healthy and channel in self._confirmed

    def unfollow(self, channel: str) -> None:
        if channel in self._followed:
            self._followed.discard(channel)
            self._sync_soon()

    def _sync_soon(self) -> None:
        if self._pubsub is None or (self._syncing is not None and not self._syncing.done()):
            return  # the connection subscribes to what is followed once made; a sync goes on until all is asked
        self._syncing = asyncio.create_task(self._sync(), name="bus-listener-channels")

    async def _sync(self) -> None:
        while (pubsub := self._pubsub) is not None:
            add, drop = self._followed - self._asked, self._asked - self._followed
            if not add and not drop:
                return
            self._ask(add)
            self._asked -= drop
            self._confirmed -= drop
            try:
                if drop:
                    await pubsub.unsubscribe(*drop)
                if add:
                    await pubsub.subscribe(*add)
            except Exception:
                if self._pubsub is pubsub:
                    return  # the connection is lost: the listener's task finds out and subscribes anew
                # else a new connection was made meanwhile: what it was not asked yet, this asks it

    def _ask(self, channels: set[str]) -> None:
        self._asked |= channels
        for channel in channels:
            self._unanswered[channel] = self._unanswered.get(channel, 0) + 1

    def _handle(self, message: dict[str, Any]) -> None:
        kind = message["type"]
        if kind in ("pmessage", "message"):
            self._deliver(message)
        elif kind == "subscribe":
            channel = message["channel"].decode()
            left = self._unanswered.pop(channel, 1) - 1
            if left > 0:
                self._unanswered[channel] = left  # a later SUBSCRIBE of it is still on its way
            elif channel in self._asked:
                self._confirmed.add(channel)

    def _deliver(self, message: dict[str, Any]) -> None:
        try:
            channel, decoded = message["channel"].decode(), json.loads(message["data"])
        except ValueError:  # not UTF-8, or not JSON: not one of ours
            log.warning("bus listener: a message on %r is not JSON", message["channel"])
            return
        self._listener.deliver(channel, decoded)

    async def _subscribe(self, pubsub: PubSub) -> None:
        """PSUBSCRIBE and SUBSCRIBE to what is followed, and wait until Redis has confirmed each pattern: only then
        is nothing published on them missed. Each channel counts as heard once its own answer is read."""
        self._asked, self._unanswered, self._confirmed = set(), {}, set()
        channels = set(self._followed)
        self._ask(channels)
        await pubsub.psubscribe(*self._patterns)
        if channels:
            await pubsub.subscribe(*channels)
        waiting = {pattern.encode() for pattern in self._patterns}
        async with asyncio.timeout(REDIS_ANSWER_SECONDS):
            while waiting:
                message = await pubsub.get_message(timeout=None)
                if message is None:
                    continue
                if message["type"] == "psubscribe":
                    waiting.discard(message["channel"])
                else:
                    self._handle(message)

    async def _run(self) -> None:
        while True:
            client = redis_client(self._url)
            pubsub = client.pubsub()
            try:
                await self._subscribe(pubsub)
                self._healthy, self._pubsub = True, pubsub
                self._reconnecting.subscribed()
                self._listener.on_reset()  # whatever was published before this subscription was missed
                self._sync_soon()  # channels followed or left while it subscribed
                pinged = False
                while True:
                    message = await pubsub.get_message(timeout=self.PING_SECONDS)
                    if message is None:
                        if pinged:
                            raise RedisConnectionError("Redis did not answer a PING")
                        await pubsub.ping()
                        pinged = True
                        continue
                    pinged = False  # anything read, the PING's answer or a message: the connection is alive
                    self._handle(message)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # whatever it was, this task must live on: it is the listener
                self._healthy, self._pubsub = False, None
                self._listener.on_reset()
                delay = self._reconnecting.failed(exc)
                await self._close(pubsub, client)
                await asyncio.sleep(delay)
            finally:
                self._healthy, self._pubsub = False, None
                await self._close(pubsub, client)

    @staticmethod
    async def _close(pubsub: PubSub, client: aioredis.Redis) -> None:
        with contextlib.suppress(Exception):
            await pubsub.aclose()  # type: ignore[no-untyped-call]
        with contextlib.suppress(Exception):
            await client.aclose()

    async def stop(self) -> None:
        if self._listener in self._local:
            self._local.remove(self._listener)
        for task in (self._task, self._syncing):
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
