"""An execution's room has a Redis channel of its own: a web process hears it only while someone watches there,
and events that move an execution between the live lists still reach every web process."""

from __future__ import annotations

import json
import time
from typing import Any

import redis.asyncio as aioredis

from chat._socketio_shortcuts import room_channel
from chat.fanout import EVENT, NAMESPACE, WorkerEmitter, room_of
from core.db import Database
from core.links import chat_view_token
from core.settings import Settings
from core.vocabulary import EventType
from tests.chat.helpers import REDIS_URL, Watcher, append, new_execution

MANAGER_CHANNEL = "socketio"  # python-socketio's default, which the service keeps


async def subscribers(redis: aioredis.Redis, channel: str) -> int:
    ((_, count),) = await redis.pubsub_numsub(channel)
    return int(count)


async def until_subscribers(redis: aioredis.Redis, channel: str, wanted: int, timeout: float = 10) -> None:
    """Until Redis counts `wanted` subscribers of `channel` (an unsubscribe is not waited for by anyone here)."""
    deadline = time.monotonic() + timeout
    while (count := await subscribers(redis, channel)) != wanted:
        assert time.monotonic() < deadline, f"{channel}: {count} subscribers, not {wanted}"
        await redis.ping()  # a round trip between looks, not a sleep: Redis answers once it is free


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


async def test_list_moving_events_go_to_every_process_and_the_rest_to_their_room_only() -> None:
    emitter = WorkerEmitter(REDIS_URL)
    redis = aioredis.Redis.from_url(REDIS_URL)
    room = room_of("exe_room_channels")
    pubsub = redis.pubsub()  # with its confirmations, waited for below
    try:
        await pubsub.subscribe(MANAGER_CHANNEL, room_channel(MANAGER_CHANNEL, room))
        confirmed = [await pubsub.get_message(timeout=10) for _ in range(2)]  # both subscribed before anything is put
        assert [m["type"] for m in confirmed if m is not None] == ["subscribe", "subscribe"]
        types = [EventType.AGENT_MESSAGE, EventType.CHECKPOINT_DECIDED, EventType.TOOL_RESULT]
        types.append(EventType.EXECUTION_COMPLETED)
        for seq, type_ in enumerate(types, start=1):
            await emitter.sink({"executionId": "exe_room_channels", "seq": seq, "type": type_, "payload": {}})
        await emitter.close()  # what was put leaves before the publisher closes
        heard: list[tuple[str, Any]] = []
        while len(heard) < len(types):
            message = await pubsub.get_message(timeout=10)
            assert message is not None, f"heard only {heard}"
            if message["type"] == "message" and message["channel"] in (
                MANAGER_CHANNEL.encode(),
                room_channel(MANAGER_CHANNEL, room).encode(),
            ):
                published = json.loads(message["data"])
                if published["data"][0]["executionId"] == "exe_room_channels":
                    heard.append((message["channel"].decode(), published))
        # In the order put, each once, each on its channel; as python-socketio's emit publishes it.
        assert [(channel, p["data"][0]["type"]) for channel, p in heard] == [
            (room_channel(MANAGER_CHANNEL, room), EventType.AGENT_MESSAGE),
            (MANAGER_CHANNEL, EventType.CHECKPOINT_DECIDED),
            (room_channel(MANAGER_CHANNEL, room), EventType.TOOL_RESULT),
            (MANAGER_CHANNEL, EventType.EXECUTION_COMPLETED),
        ]
        assert {(p["method"], p["event"], p["namespace"], p["room"]) for _, p in heard} == {
            ("emit", EVENT, NAMESPACE, room)
        }
    finally:
        await pubsub.aclose()
        await redis.aclose()
