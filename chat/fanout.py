"""How committed events reach the chat rooms, in every shape the service runs in.

An event is a row first; once its transaction commits, `core.db.Database` hands its wire message
(`core.events.event_message`, the one place a row becomes a message) to the event sinks registered at
start-up. This module provides the sinks:

- a web process (`vouch web`, `vouch serve`) emits through its own Socket.IO server. With Redis, that
  server's manager is `AsyncRedisManager`: the emit reaches the local room at once and every other web
  process through Redis. Without Redis, everything stays in this process (the embedded `vouch serve`,
  whose worker shares the web app's Database and so its sink).
- a worker process (`vouch worker`) has no Socket.IO server: it publishes through a write-only
  `AsyncRedisManager`, which every web process's manager hears and delivers to its local room.

Nothing here imports Quart: the worker uses this module too. Delivery is best-effort by design; a
watcher that misses a message finds the gap by `seq` and asks the database for it.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any, Protocol

import socketio
from engineio import packet as eio_packet  # type: ignore[import-untyped]
from socketio import packet as sio_packet

log = logging.getLogger(__name__)

NAMESPACE = "/chat"
# The one server-to-client event name: an event row's wire message.
EVENT = "event"


def room_of(execution_id: str) -> str:
    return f"execution:{execution_id}"


class _Emitter(Protocol):
    async def emit(self, event: str, data: Any, *, namespace: str, room: str) -> Any: ...


class RoomSink:
    """An event sink (core.db.EventSink) that emits each message into its execution's room."""

    def __init__(self, emitter: Any) -> None:
        # An AsyncServer (web) or a write-only AsyncRedisManager (worker): both take these arguments.
        self._emitter: _Emitter = emitter

    async def __call__(self, message: dict[str, Any]) -> None:
        await self._emitter.emit(EVENT, message, namespace=NAMESPACE, room=room_of(message["executionId"]))


class InTurnDelivery(socketio.AsyncManager):  # type: ignore[misc]
    """Local delivery to a room without a task per recipient.

    python-socketio's manager starts one asyncio task per recipient for every message and waits for them all;
    for a room of 1,000 watchers that bookkeeping, not the sending, is most of the cost. Handing a packet to a
    socket only puts it on that socket's unbounded queue, so doing it in turn is just as fair, keeps each
    watcher's order, and measured (bench/chat_fanout.py) four to five times the deliveries per second. One
    recipient's failure is logged and skips only that recipient. Emits with a callback keep the library's path.
    """

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
        send = getattr(self.server, "_send_eio_packet", None)
        if callback is not None or send is None or namespace not in self.rooms:
            await super().emit(event, data, namespace, room=room, skip_sid=skip_sid, callback=callback, **kwargs)
            return
        args = list(data) if isinstance(data, tuple) else ([] if data is None else [data])
        skip = skip_sid if isinstance(skip_sid, list) else [skip_sid]
        # Encoded once for the whole room, as the library does.
        encoded = self.server.packet_class(sio_packet.EVENT, namespace=namespace, data=[event, *args]).encode()
        parts = encoded if isinstance(encoded, list) else [encoded]
        frames = [eio_packet.Packet(eio_packet.MESSAGE, part) for part in parts]
        for sid, eio_sid in list(self.get_participants(namespace, room)):
            if sid in skip:
                continue
            for frame in frames:
                try:
                    await send(eio_sid, frame)
                except Exception:
                    log.warning("chat: could not send to %s", sid, exc_info=True)


class RedisInTurnDelivery(socketio.AsyncRedisManager, InTurnDelivery):  # type: ignore[misc]
    """Rooms shared through Redis; what arrives is delivered locally in turn (the MRO puts InTurnDelivery's
    emit under the pub/sub manager's own, which publishes, then delivers here)."""


def server_manager(redis_url: str | None) -> socketio.AsyncManager:
    """The web server's client manager: shared through Redis when configured, in-process otherwise."""
    if redis_url:
        return RedisInTurnDelivery(redis_url)
    return InTurnDelivery()


async def listen_before_serving(server: socketio.AsyncServer, timeout: float = 10.0) -> None:
    """Start the Redis manager's listener now and wait until it has subscribed.

    python-socketio starts it lazily on the first connection; a watcher who joined in the moments
    before the SUBSCRIBE reached Redis would miss live events published meanwhile (its join replays
    only what was committed before). Subscribing before the port opens closes that window.
    """
    manager = server.manager
    if not isinstance(manager, socketio.AsyncRedisManager):
        return
    if not server.manager_initialized:
        server.manager_initialized = True
        manager.initialize()
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    # redis-py marks a PubSub subscribed once SUBSCRIBE is sent on its connection; Redis handles it before
    # any PUBLISH a later join could cause. Polled: python-socketio offers no hook for the moment.
    while not (manager.pubsub is not None and manager.pubsub.subscribed):
        if loop.time() > deadline:
            log.warning("the Socket.IO Redis listener has not subscribed after %s s; continuing", timeout)
            return
        await asyncio.sleep(0.01)


class WorkerEmitter:
    """A worker's sink: a write-only Redis manager, no server, no Quart."""

    def __init__(self, redis_url: str) -> None:
        self.manager = socketio.AsyncRedisManager(redis_url, write_only=True)
        self.sink = RoomSink(self.manager)

    async def close(self) -> None:
        redis = getattr(self.manager, "redis", None)
        if redis is not None:
            await redis.aclose()
