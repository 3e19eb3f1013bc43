"""How committed events reach the chat rooms, in every shape the service runs in.

An event is a row first; once its transaction commits, `core.db.Database` hands its wire message
(`core.event_messages.event_message`, the one place a row becomes a message) to the event sinks registered at
start-up. This module provides the sinks:

- a web process (`vouch web`, `vouch serve`) emits through its own Socket.IO server. With Redis, that
  server's manager is `AsyncRedisManager`: the emit reaches the local room at once and, through Redis, every
  other web process with a watcher in the room (the list-moving events: every other web process). Without
  Redis, everything stays in this process (the embedded `vouch serve`, whose worker shares the web app's
  Database and so its sink).
- a worker process (`vouch worker`) has no Socket.IO server: it publishes through a write-only
  `AsyncRedisManager`, whose messages the web processes' managers hear as above and deliver to their rooms.

Nothing here imports Quart: the worker uses this module too. Delivery is best-effort by design; a
watcher that misses a message finds the gap by `seq` and asks the database for it.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any, Protocol

import socketio

from chat._socketio_shortcuts import InTurnDelivery, RedisInTurnDelivery, pubsub_emit, room_channel
from core import jsontext
from core.bus import SentInOrder
from core.redis_bus import RedisPublisher
from core.vocabulary import ENDING_EVENTS, EventType

log = logging.getLogger(__name__)

NAMESPACE = "/chat"
# The server-to-client event names: an event row's wire message, and the model's text while it is being
# written ({executionId, stream, index, text}: never stored, never replayed; the stored agent.message follows).
EVENT = "event"
DELTA = "delta"


# The events that move an execution between the live lists (chat/lists.py), whose watchers are in rooms of their own:
# besides their room's channel, they go on LISTS_HEARD's.
MOVES_BETWEEN_LISTS = frozenset(
    {
        EventType.EXECUTION_CREATED,
        EventType.EXECUTION_STARTED,
        EventType.EXECUTION_RESUMED,
        EventType.EXECUTION_UPDATED,
        EventType.CHECKPOINT_AWAITING_REVIEW,
        EventType.CHECKPOINT_DECIDED,
        EventType.REVIEW_ESCALATED,
        *ENDING_EVENTS,
        # A run with scorers is finished for its suite only once scored: its verdict is the last change there.
        EventType.EXECUTION_SCORED,
    }
)
_ROOM_PREFIX = "execution:"
# The live lists' rooms (chat/lists.py) begin so.
LIST_ROOM_PREFIX = "lists:"
# The channel (`room_channel`) on which the events that move an execution between the lists are heard, which a web
# process subscribes to while someone has a list open there. Each goes there as an emit into the room of that name,
# which nobody is ever in: the process hears it (the manager's `heard`: chat/lists.py) and sends it to no socket;
# the execution's watchers have it from their room's channel.
LISTS_HEARD = "lists"


def room_of(execution_id: str) -> str:
    return f"{_ROOM_PREFIX}{execution_id}"


def channel_of(room: str) -> str | None:
    """The name of the Redis channel `room`'s messages are heard on (`room_channel`): an execution's room has its
    own, the live lists' rooms share LISTS_HEARD's, and any other room's go on the manager's (None)."""
    if room.startswith(_ROOM_PREFIX):
        return room
    if room.startswith(LIST_ROOM_PREFIX):
        return LISTS_HEARD
    return None


class _Emitter(Protocol):
    async def emit(self, event: str, data: Any, *, namespace: str, room: str) -> Any: ...


class RoomSink:
    """An event sink (core.db.EventSink) that emits each message into its execution's room."""

    def __init__(self, emitter: Any) -> None:
        # An AsyncServer (web) or a write-only AsyncRedisManager (worker): both take these arguments.
        self._emitter: _Emitter = emitter

    async def __call__(self, message: dict[str, Any]) -> None:
        await self._emitter.emit(EVENT, message, namespace=NAMESPACE, room=room_of(message["executionId"]))

    async def live(self, message: dict[str, Any]) -> None:
        await self._emitter.emit(DELTA, message, namespace=NAMESPACE, room=room_of(message["executionId"]))


class QueuedRoomSink:
    """The event sink of a process whose Socket.IO manager is shared through Redis (a web process with Redis, or
    a worker's write-only manager). Each event is published to Redis at once and never waited for
    (`core.redis_bus.RedisPublisher`): a commit waits for no round trip, and an agent step's events leave in one write.
    The publisher is the caller's, and the bus's where there is one: the chat's messages and the bus's of one
    commit then leave in one write on one connection, not one on each.

    It publishes what python-socketio's `AsyncPubSubManager.emit` publishes (chat/_socketio_shortcuts.py), so a web
    process's manager delivers it as its own: on the room's channel, which only the processes watching the room
    hear, and, for an event that moves the execution between lists, on LISTS_HEARD's too, which those with a list
    open hear. All leave on one connection in the order put, and reach each subscriber in that order. With `local`, this
    process's own rooms are served too, in order, from a task of its own, as `emit` does (the manager skips its own
    messages when they come back from Redis): a commit does not wait for a room's fan-out either.
    """

    def __init__(self, manager: socketio.AsyncPubSubManager, publisher: RedisPublisher, *, local: bool) -> None:
        self._manager = manager
        self._publisher = publisher
        # (event name, message): events and deltas leave in the one order they were put.
        self._local: SentInOrder[tuple[str, dict[str, Any]]] | None = (
            SentInOrder(self._emit, "chat-emitter") if local else None
        )

    async def __call__(self, message: dict[str, Any]) -> None:
        self._send(EVENT, message)

    async def live(self, message: dict[str, Any]) -> None:
        self._send(DELTA, message)

    def _send(self, name: str, message: dict[str, Any]) -> None:
        if self._local is not None:
            self._local.put((name, message))
        rooms = [room_of(message["executionId"])]
        if name == EVENT and message.get("type") in MOVES_BETWEEN_LISTS:
            rooms.append(LISTS_HEARD)
        for room in rooms:
            published = pubsub_emit(self._manager, name, NAMESPACE, room, message)
            self._publisher.publish(room_channel(self._manager.channel, room), jsontext.dumps(published))

    async def _emit(self, batch: list[tuple[str, dict[str, Any]]]) -> None:
        for name, message in batch:
            try:
                room = room_of(message["executionId"])
                await self._manager.emit(name, message, namespace=NAMESPACE, room=room, ignore_queue=True)
            except Exception:
                log.warning("chat: emitting %s %s seq %s failed", name, message["executionId"], message.get("seq"),
                            exc_info=True)

    async def close(self, timeout: float = 5.0) -> None:
        """Deliver to this process's rooms what was put so far (waiting at most `timeout` seconds). What went to
        Redis leaves when the publisher's owner closes it."""
        if self._local is not None:
            await self._local.flush(timeout)


def server_manager(redis_url: str | None) -> socketio.AsyncManager:
    """The web server's client manager: shared through Redis when configured, in-process otherwise."""
    if redis_url:
        return RedisInTurnDelivery(redis_url, channel_of)
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
    """A worker's sink: a write-only Redis manager, no server, no Quart. It publishes through `publisher` (the
    worker's bus's) or, given none, through one of its own."""

    def __init__(self, redis_url: str, publisher: RedisPublisher | None = None) -> None:
        self.manager = socketio.AsyncRedisManager(redis_url, write_only=True)
        self._owns_publisher = publisher is None
        self._publisher = publisher if publisher is not None else RedisPublisher(redis_url)
        self.sink = QueuedRoomSink(self.manager, self._publisher, local=False)

    async def close(self) -> None:
        await self.sink.close()
        if self._owns_publisher:
            await self._publisher.close()
