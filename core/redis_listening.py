"""A bus listener over Redis: pattern subscriptions for its prefixes, a channel subscription for each channel it
follows, kept up on a connection of its own (`RedisListening`, made by `core.redis_bus.RedisBus.listen`)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
from typing import Any

import redis.asyncio as aioredis
from redis.asyncio.client import PubSub
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.exceptions import ConnectionError as RedisConnectionError

from core import jsontext
from core.beats import seconds_to_beat
from core.bus import LocalListener
from core.reconnect import Reconnecting
from core.redis_calls import REDIS_ANSWER_SECONDS

log = logging.getLogger(__name__)

# How long a listener's `stop` waits for the cancelled task to end before it cancels it again.
_STOP_AGAIN_SECONDS = 0.5


def redis_client(
    url: str, timeout: float | None = REDIS_ANSWER_SECONDS, *, connect_timeout: float = REDIS_ANSWER_SECONDS
) -> aioredis.Redis:
    """redis-py's client for `url` (redis://, rediss://, unix://…?db=N; `?client_name=` names its connections), with
    redis-py's own retries off: each caller here has its own answer to a lost connection (a listener resubscribes
    and says so, the rate limiter falls back per process), and retries would hide the loss or stretch a timeout."""
    return aioredis.Redis.from_url(
        url, socket_timeout=timeout, socket_connect_timeout=connect_timeout, retry=Retry(NoBackoff(), 0)
    )


def pattern_of(prefix: str) -> str:
    """The PSUBSCRIBE pattern of every channel that starts with `prefix`."""
    return re.sub(r"([*?\[\]\\])", r"\\\1", prefix) + "*"


class RedisListening:
    """One pattern subscription per listener prefix, and one channel subscription per followed channel, on a
    connection of its own, kept up by a task: on any failure it calls `on_reset`, waits (core/reconnect.py: one
    warning, a doubling wait up to a cap, one line once back), and subscribes again (calling `on_reset` once more,
    for what was published while it was away). The task delivers each message as it reads it. A PING after a few
    idle seconds (at the next beat, core/beats.py, with the process's other looks), unanswered until the beat
    after, finds a connection that died silently.

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
        self._stopped = False
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
            channel, decoded = message["channel"].decode(), jsontext.loads(message["data"])
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
        while not self._stopped:
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
                    message = await pubsub.get_message(timeout=seconds_to_beat(self.PING_SECONDS))
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
            await pubsub.aclose()
        with contextlib.suppress(Exception):
            await client.aclose()

    async def stop(self) -> None:
        self._stopped = True
        if self._listener in self._local:
            self._local.remove(self._listener)
        for task in (self._task, self._syncing):
            if task is None:
                continue
            # Asked again until it ends: a cancellation can be spent inside redis-py's teardown of a lost
            # connection, which waits for its close whatever is cancelled meanwhile (seen once in CI: the listener
            # went on to sleep until its next attempt, and the worker's stop waited on it).
            while not task.done():
                task.cancel()
                await asyncio.wait({task}, timeout=_STOP_AGAIN_SECONDS)
            with contextlib.suppress(asyncio.CancelledError):
                await task
