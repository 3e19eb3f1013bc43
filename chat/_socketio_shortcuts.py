"""Every use of python-socketio's internals, in one place: delivering to a room in turn, listening to Redis as
the service's other subscriptions do, and publishing what `AsyncPubSubManager.emit` publishes.

Kept because the bench's alternating pairs show in-turn delivery buys more than 30 % on the chat fan-out's figures
(bench/README.md, issue 21); python-socketio has no public way to send one encoded packet to many sockets.

What it relies on, as read in python-socketio 5.18 (pyproject.toml caps it below 5.19 for this module; read this
code again before widening the range), each pinned by tests/chat/test_library_shortcuts.py:

- `AsyncServer._send_eio_packet(eio_sid, packet)` and `AsyncServer.packet_class`;
- `AsyncRedisManager._redis_listen_with_retries()` (the async iterator its listener reads), `_redis_connect()`,
  and its `redis` and `pubsub` attributes;
- `AsyncRedisManager._listen()` (what `_thread` reads: the data of each message of its channels);
- `BaseManager.basic_enter_room` and `basic_leave_room`, through which every way into and out of a room goes
  (`enter_room`, `leave_room`, `close_room`, a disconnect), and its `rooms` by namespace;
- the form of the message `AsyncPubSubManager.emit` publishes and `_handle_emit` reads (`pubsub_emit`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable
from typing import Any

import socketio
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.exceptions import ConnectionError as RedisConnectionError
from socketio import packet as sio_packet

from chat._engineio_shortcuts import MESSAGE, DirectWebSocket, Packet, direct_to, use_direct_websockets
from core.reconnect import Reconnecting

log = logging.getLogger("chat.fanout")

# How long joining a room waits for its channel's SUBSCRIBE to be sent before it reads what to replay.
ROOM_SUBSCRIBE_SECONDS = 2.0


def room_channel(channel: str, room: str) -> str:
    """The Redis channel of one room's messages, beside the manager's own `channel`: only the processes with a
    watcher in the room subscribe to it, so Redis drops what nobody watches (`RedisInTurnDelivery`)."""
    return f"{channel}#{room}"


def pubsub_emit(manager: socketio.AsyncPubSubManager, event: str, namespace: str, room: str, data: Any) -> Any:
    """What `manager.emit(event, data, namespace=…, room=…)` publishes, for every web process's manager to
    deliver as its own."""
    return {
        "method": "emit",
        "event": event,
        "data": [data],
        "binary": False,  # JSON from our own event rows
        "namespace": namespace,
        "room": room,
        "skip_sid": None,
        "callback": None,
        "host_id": manager.host_id,
    }


class InTurnDelivery(socketio.AsyncManager):  # type: ignore[misc]
    """Local delivery to a room without a task per recipient.

    python-socketio's manager starts one asyncio task per recipient for every message and waits for them all;
    for a room of 1,000 watchers that bookkeeping, not the sending, is most of the cost. Handing a packet to a
    socket only puts it on that socket's unbounded queue, so doing it in turn is just as fair, keeps each
    watcher's order, and measured (bench/chat_fanout.py) four to five times the deliveries per second. A
    websocket's frames are written directly (DirectWebSocket), other transports' go through engine.io. One
    recipient's failure is logged and skips only that recipient. Emits with a callback keep the library's path.

    A watcher whose frames are the room's (`takes_room_frames`) gets the first of a turn of the loop at once and
    the rest of that turn in one write as it ends: a commit's events, or a burst of the model's text, cost each
    watcher two system calls and two TCP segments rather than one per message (the writes were three quarters of
    the fan-out's CPU), and a lone message waits for nothing (bench/README.md, issue 25).
    """

    # Told of every event delivered here, before its room's recipients (chat/lists.py's ListNotifier).
    heard: Callable[[str, Any], None] | None = None

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # The websockets a room's frame went to in this turn of the loop, whose turn ends with it (`_end_turn`);
        # two lists kept in turn, for the reason DirectWebSocket keeps its own.
        self._in_turn: list[DirectWebSocket] = []
        self._spare: list[DirectWebSocket] = []

    def _end_turn(self) -> None:
        ended = self._in_turn
        self._in_turn = self._spare
        for ws in ended:
            try:
                ws.end_turn()
            except Exception:
                log.warning("chat: could not send to a watcher", exc_info=True)
        ended.clear()
        self._spare = ended

    def set_server(self, server: Any) -> None:
        super().set_server(server)
        use_direct_websockets(getattr(server, "eio", None))

    async def emit(
        self,
        event: str,
        data: Any,
        namespace: str,
        room: str | None = None,
        skip_sid: Any = None,
        callback: Any = None,
        to: str | None = None,
        **kwargs: Any,
    ) -> None:
        room = to or room
        if self.heard is not None:
            self.heard(event, data)
        send = getattr(self.server, "_send_eio_packet", None)
        if callback is not None or send is None or namespace not in self.rooms:
            await super().emit(event, data, namespace, room=room, skip_sid=skip_sid, callback=callback, **kwargs)
            return
        skip = skip_sid if isinstance(skip_sid, list) else [skip_sid]
        recipients = [(sid, eio_sid) for sid, eio_sid in self.get_participants(namespace, room) if sid not in skip]
        if not recipients:
            return  # most events of most executions: nobody is watching, nothing to encode
        args = list(data) if isinstance(data, tuple) else ([] if data is None else [data])
        # Encoded once for the whole room, as the library does.
        encoded = self.server.packet_class(sio_packet.EVENT, namespace=namespace, data=[event, *args]).encode()
        parts = encoded if isinstance(encoded, list) else [encoded]
        frames = [Packet(MESSAGE, part) for part in parts]
        wire = [frame.encode() for frame in frames]
        # The websocket frames themselves, built once for the room when a watcher can take them as they are.
        built: list[bytes] | None = None
        eio = getattr(self.server, "eio", None)
        for sid, eio_sid in recipients:
            ws = direct_to(eio, eio_sid)
            if ws is not None:
                try:
                    if ws.takes_room_frames():
                        if built is None:
                            from chat._uvicorn_shortcuts import room_frame  # a web process's: the worker has no server

                            built = [room_frame(data) for data in wire]
                        for data, whole in zip(wire, built, strict=True):
                            if ws.deliver_in_turn(data, whole):
                                if not self._in_turn:
                                    asyncio.get_running_loop().call_soon(self._end_turn)
                                self._in_turn.append(ws)
                        continue
                    for data in wire:
                        ws.deliver(data)
                except Exception:
                    log.warning("chat: could not send to %s", sid, exc_info=True)
                continue
            for frame in frames:
                try:
                    await send(eio_sid, frame)
                except Exception:
                    log.warning("chat: could not send to %s", sid, exc_info=True)


class RedisInTurnDelivery(socketio.AsyncRedisManager, InTurnDelivery):  # type: ignore[misc]
    """Rooms shared through Redis; what arrives is delivered locally in turn (the MRO puts InTurnDelivery's
    emit under the pub/sub manager's own, which publishes, then delivers here).

    Besides the manager's channel, it listens to the channel `channel_of` names for a room (`room_channel`) while
    someone is in that room, or in another room of the same channel, here: publishers that send there
    (chat/fanout.py) reach only the processes watching, where every web process decoded every message of every
    execution to find most of them watched by nobody (issue 25). Joining such a room waits until its SUBSCRIBE has
    been sent, so that what commits after the join's replay read arrives live (as `listen_before_serving` for the
    manager's channel).

    Its listener keeps its subscription up as every other Redis subscription here does (core/reconnect.py).
    python-socketio's own loop logged an error on every failed attempt, waited up to a minute between them, never
    said when it was back, and left each lost subscription's connection open; and redis-py's retries, which
    resubscribe behind the caller's back, are off (no retries: a lost connection is raised, and counted here).
    """

    def __init__(self, url: str, channel_of: Callable[[str], str | None] = lambda room: None) -> None:
        super().__init__(url, redis_options={"retry": Retry(NoBackoff(), 0)})
        self._reconnecting = Reconnecting(
            "the chat's Socket.IO listener", "live events from other processes are missed (watchers catch up by seq)"
        )
        self._channel_of = channel_of
        # The rooms here with someone in them, by the channel (`room_channel`) they are heard on; the channels
        # wanted (those with such a room); those subscribed on the current pubsub, which counts one more each time
        # the listener subscribes anew (a change made for an older one is not this one's).
        self._rooms_by_channel: dict[str, set[str]] = {}
        self._wanted: set[str] = set()
        self._subscribed: set[str] = set()
        self._subscription = 0
        self._listening = False
        self._syncing: asyncio.Task[None] | None = None

    def basic_enter_room(self, sid: str, namespace: str, room: Any, eio_sid: str | None = None) -> None:
        super().basic_enter_room(sid, namespace, room, eio_sid=eio_sid)
        name = self._channel_of(room) if isinstance(room, str) else None
        if name is not None:
            channel = room_channel(self.channel, name)
            self._rooms_by_channel.setdefault(channel, set()).add(room)
            self._want(channel, True)

    def basic_leave_room(self, sid: str, namespace: str, room: Any) -> None:
        super().basic_leave_room(sid, namespace, room)
        name = self._channel_of(room) if isinstance(room, str) else None
        if name is None or any(room in rooms for rooms in self.rooms.values()):
            return
        channel = room_channel(self.channel, name)
        watched = self._rooms_by_channel.get(channel, set())
        watched.discard(room)
        if not watched:
            self._rooms_by_channel.pop(channel, None)
            self._want(channel, False)

    async def enter_room(self, sid: str, namespace: str, room: Any, eio_sid: str | None = None) -> None:
        await super().enter_room(sid, namespace, room, eio_sid=eio_sid)
        syncing = self._syncing
        if syncing is not None and not syncing.done():
            # Bounded: with Redis away, live events are missed anyway (watchers catch up by seq).
            await asyncio.wait({syncing}, timeout=ROOM_SUBSCRIBE_SECONDS)

    def _want(self, channel: str, wanted: bool) -> None:
        if (channel in self._wanted) == wanted:
            return
        if wanted:
            self._wanted.add(channel)
        else:
            self._wanted.discard(channel)
        self._sync_soon()

    def _sync_soon(self) -> None:
        if self._syncing is not None and not self._syncing.done():
            return  # it goes on until what is subscribed is what is wanted
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return  # no loop, no listener yet: it subscribes to what is wanted when it starts
        self._syncing = loop.create_task(self._sync(), name="chat-room-channels")

    async def _sync(self) -> None:
        while self._listening and self.pubsub is not None:
            pubsub, subscription = self.pubsub, self._subscription
            add, drop = self._wanted - self._subscribed, self._subscribed - self._wanted
            if not add and not drop:
                return
            try:
                if add:
                    await pubsub.subscribe(*add)
                if drop:
                    await pubsub.unsubscribe(*drop)
            except Exception:
                return  # the listener subscribes to what is wanted once it is back
            if subscription != self._subscription:
                return  # subscribed anew meanwhile, to what was wanted then; it syncs again itself
            self._subscribed = (self._subscribed | add) - drop

    async def _listen(self) -> AsyncIterator[Any]:
        own, rooms = self.channel.encode(), room_channel(self.channel, "").encode()
        async for message in self._redis_listen_with_retries():
            if message["type"] == "message" and "data" in message:
                channel = message["channel"]
                if channel == own or channel.startswith(rooms):
                    yield message["data"]

    async def _redis_listen_with_retries(self) -> AsyncIterator[dict[str, Any]]:
        while True:
            if self.redis is None:
                self._redis_connect()
            # A pubsub of its own each time, on the one client's pool: the manager's publishes share that client.
            pubsub = self.pubsub = self.redis.pubsub(ignore_subscribe_messages=True)
            try:
                self._subscription += 1
                wanted = set(self._wanted)
                await pubsub.subscribe(self.channel, *wanted)
                self._subscribed, self._listening = wanted, True
                self._reconnecting.subscribed()
                self._sync_soon()  # rooms entered or left while it subscribed
                async for message in pubsub.listen():
                    yield message
                raise RedisConnectionError("the subscription ended")  # listen() ends only once unsubscribed
            except Exception as exc:
                self._listening = False
                delay = self._reconnecting.failed(exc)
                with contextlib.suppress(Exception):
                    await pubsub.aclose()  # its connection, reconnected by redis-py on the way out, goes too
                await asyncio.sleep(delay)
