"""The event bus: wake-ups and live events between processes, published after commit.

In-process by default; Redis pub/sub when VOUCH_REDIS_URL is set. The bus only carries
news of rows already committed, so a lost message costs latency, never data.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any, Protocol

import redis.asyncio as aioredis

WAKE_CHANNEL = "vouch:wake"


def execution_channel(execution_id: str) -> str:
    return f"vouch:execution:{execution_id}"


class Subscription(Protocol):
    async def get(self, timeout: float | None = None) -> dict[str, Any] | None:
        """The next message, or None once `timeout` seconds pass without one."""


class Bus(Protocol):
    async def publish(self, channel: str, message: dict[str, Any]) -> None: ...

    def subscribe(self, *channels: str) -> AbstractAsyncContextManager[Subscription]: ...

    async def close(self) -> None: ...


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

    async def publish(self, channel: str, message: dict[str, Any]) -> None:
        for sub in tuple(self._subscribers.get(channel, ())):
            sub.queue.put_nowait(message)

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


class RedisBus:
    """For many processes on many machines."""

    def __init__(self, url: str) -> None:
        self._redis = aioredis.Redis.from_url(url)

    async def publish(self, channel: str, message: dict[str, Any]) -> None:
        await self._redis.publish(channel, json.dumps(message, separators=(",", ":")))

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
        await self._redis.aclose()


def make_bus(redis_url: str | None) -> Bus:
    return RedisBus(redis_url) if redis_url else InProcessBus()
