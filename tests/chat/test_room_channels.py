"""An execution's room has a Redis channel of its own: a web process hears it only while someone watches there;
and events that move an execution between the live lists reach, besides, every web process where a list is open."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import urlsplit

import psutil
import redis.asyncio as aioredis

from chat._socketio_shortcuts import room_channel
from chat.fanout import EVENT, LISTS_HEARD, NAMESPACE, WorkerEmitter, room_of
from core.db import Database
from core.ids import new_id
from core.links import chat_view_token
from core.settings import Settings
from core.vocabulary import EventType
from tests.chat.helpers import REDIS_URL, Watcher, append, new_execution, sign_in

MANAGER_CHANNEL = "socketio"  # python-socketio's default, which the service keeps


async def subscribers(redis: aioredis.Redis, channel: str) -> int:
    ((_, count),) = await redis.pubsub_numsub(channel)
    return int(count)


async def until_counted(
    redis: aioredis.Redis, count: Callable[[], Awaitable[int]], wanted: int, what: str, timeout: float = 10
) -> None:
    """Until `count` (of something Redis tells) is `wanted`: an unsubscribe is not waited for by anyone here."""
    deadline = time.monotonic() + timeout
    while (counted := await count()) != wanted:
        assert time.monotonic() < deadline, f"{what}: {counted}, not {wanted}"
        await redis.ping()  # a round trip between looks, not a sleep: Redis answers once it is free


async def until_subscribers(redis: aioredis.Redis, channel: str, wanted: int) -> None:
    await until_counted(redis, lambda: subscribers(redis, channel), wanted, f"subscribers of {channel}")


async def test_a_web_process_subscribes_to_a_room_channel_while_someone_watches_there(
    web: str, worker_db: Database, chat_settings: Settings, watchers: list[Watcher]
) -> None:
    execution_id = await new_execution(worker_db, chat_settings)
    channel = room_channel(MANAGER_CHANNEL, room_of(execution_id))
    redis = aioredis.Redis.from_url(REDIS_URL)
    try:
        assert await subscribers(redis, channel) == 0
        token = chat_view_token(chat_settings.secret_key, execution_id)
        watchers.extend([Watcher(), Watcher()])
        first, second = watchers
        for watcher in watchers:
            await watcher.connect(web, auth={"executionId": execution_id, "token": token})
            assert (await watcher.join(execution_id, token=token))["ok"] is True
        # Joined: subscribed before the join's answer, once for the process however many watch there.
        assert await subscribers(redis, channel) == 1
        (seq,) = await append(worker_db, execution_id)  # an agent.message: its room's channel only
        await first.until_live(execution_id, seq)
        await second.until_live(execution_id, seq)

        await first.close()
        (seq,) = await append(worker_db, execution_id)
        await second.until_live(execution_id, seq)  # the room still has a watcher here: still subscribed
        assert await subscribers(redis, channel) == 1
        await second.close()
        await until_subscribers(redis, channel, 0)
    finally:
        await redis.aclose()


async def test_list_moving_events_go_to_their_room_and_the_lists_channel_and_the_rest_to_their_room_only() -> None:
    emitter = WorkerEmitter(REDIS_URL)
    redis = aioredis.Redis.from_url(REDIS_URL)
    room = room_of("exe_room_channels")
    channels = [MANAGER_CHANNEL, room_channel(MANAGER_CHANNEL, room), room_channel(MANAGER_CHANNEL, LISTS_HEARD)]
    pubsub = redis.pubsub()  # with its confirmations, waited for below
    try:
        await pubsub.subscribe(*channels)
        confirmed = [await pubsub.get_message(timeout=10) for _ in channels]  # subscribed before anything is put
        assert [m["type"] for m in confirmed if m is not None] == ["subscribe"] * len(channels)
        types = [EventType.AGENT_MESSAGE, EventType.CHECKPOINT_DECIDED, EventType.TOOL_RESULT]
        types.append(EventType.EXECUTION_COMPLETED)
        for seq, type_ in enumerate(types, start=1):
            await emitter.sink({"executionId": "exe_room_channels", "seq": seq, "type": type_, "payload": {}})
        await emitter.close()  # what was put leaves before the publisher closes
        # Published after all of them: whatever of theirs went to the manager's channel arrives before it.
        await redis.publish(MANAGER_CHANNEL, "end of the test's messages")
        heard: list[tuple[str, Any]] = []
        while True:
            message = await pubsub.get_message(timeout=10)
            assert message is not None, f"heard only {heard}"
            if message["type"] != "message":
                continue
            if message["channel"] == MANAGER_CHANNEL.encode() and message["data"] == b"end of the test's messages":
                break
            published = json.loads(message["data"])
            if published["data"][0]["executionId"] == "exe_room_channels":
                heard.append((message["channel"].decode(), published))
        # In the order put, each once on its room's channel, and the list-moving ones on the lists channel too (into a
        # room nobody is in); none on the manager's channel; as python-socketio's emit publishes it.
        assert [(channel, p["room"], p["data"][0]["type"]) for channel, p in heard] == [
            (room_channel(MANAGER_CHANNEL, room), room, EventType.AGENT_MESSAGE),
            (room_channel(MANAGER_CHANNEL, room), room, EventType.CHECKPOINT_DECIDED),
            (room_channel(MANAGER_CHANNEL, LISTS_HEARD), LISTS_HEARD, EventType.CHECKPOINT_DECIDED),
            (room_channel(MANAGER_CHANNEL, room), room, EventType.TOOL_RESULT),
            (room_channel(MANAGER_CHANNEL, room), room, EventType.EXECUTION_COMPLETED),
            (room_channel(MANAGER_CHANNEL, LISTS_HEARD), LISTS_HEARD, EventType.EXECUTION_COMPLETED),
        ]
        assert {(p["method"], p["event"], p["namespace"]) for _, p in heard} == {("emit", EVENT, NAMESPACE)}
    finally:
        await pubsub.aclose()
        await redis.aclose()


async def subscriptions_here(redis: aioredis.Redis) -> int:
    """How many channels this process's connections to Redis are subscribed to (CLIENT LIST's `sub`): the web process
    under test serves from here, while the suite's other workers run web processes of their own on the same Redis,
    which may open a live list (and so subscribe to the lists' channel) at any time."""
    port = urlsplit(REDIS_URL).port or 6379
    ours = {c.laddr.port for c in psutil.Process().net_connections(kind="tcp") if c.raddr and c.raddr.port == port}
    return sum(int(c["sub"]) for c in await redis.client_list() if int(c["addr"].rsplit(":", 1)[1]) in ours)


async def test_a_web_process_hears_list_moving_events_while_someone_there_has_a_list_open(
    web: str, worker_db: Database, chat_settings: Settings, watchers: list[Watcher]
) -> None:
    owner = f"{new_id('owner')}@example.com"
    execution_id = await new_execution(worker_db, chat_settings, owner=owner)
    redis = aioredis.Redis.from_url(REDIS_URL)
    try:
        before = await subscriptions_here(redis)
        cookie, _ = await sign_in(worker_db, chat_settings.secret_key, owner)
        watcher = Watcher()
        watchers.append(watcher)
        pinged = asyncio.Event()
        watcher.client.on("lists", lambda *_: pinged.set(), namespace=NAMESPACE)
        await watcher.connect(web, cookie=cookie)
        answer = await watcher.client.call("watch_lists", {}, namespace=NAMESPACE, timeout=15)
        assert answer["ok"] is True
        # Subscribed before the answer, as for a room's channel: to the lists' one, one channel more.
        assert await subscriptions_here(redis) == before + 1
        await append(worker_db, execution_id, type_=EventType.EXECUTION_STARTED)  # from a worker, through Redis
        await asyncio.wait_for(pinged.wait(), 15)
        await watcher.close()
        await until_counted(redis, lambda: subscriptions_here(redis), before, "channels subscribed from here")
    finally:
        await redis.aclose()
