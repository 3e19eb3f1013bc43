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
import contextlib
import logging
import types
import weakref
from collections import deque
from collections.abc import AsyncIterator, Coroutine, Generator
from typing import Any, Protocol

import socketio
from engineio import packet as eio_packet  # type: ignore[import-untyped]
from engineio.async_drivers import asgi as eio_asgi  # type: ignore[import-untyped]
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.exceptions import ConnectionError as RedisConnectionError
from socketio import packet as sio_packet

from core.bus import SentInOrder
from core.reconnect import Reconnecting
from core.redis_bus import RedisPublisher

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


class QueuedRoomSink:
    """The event sink of a process whose Socket.IO manager is shared through Redis (a web process with Redis, or
    a worker's write-only manager). Each event is published to Redis at once and never waited for
    (`core.redis_bus.RedisPublisher`): a commit waits for no round trip, and an agent step's events leave in one write.
    The publisher is the caller's, and the bus's where there is one: the chat's messages and the bus's of one
    commit then leave in one write on one connection, not one on each.

    It publishes what python-socketio's `AsyncPubSubManager.emit` publishes, so every web process's manager
    delivers it as its own; the message's form is that library's, whose version range is pinned in
    pyproject.toml for it. With `local`, this process's own rooms are served too, in order, from a task of its
    own, as `emit` does (the manager skips its own messages when they come back from Redis): a commit does not
    wait for a room's fan-out either.
    """

    def __init__(self, manager: socketio.AsyncPubSubManager, publisher: RedisPublisher, *, local: bool) -> None:
        self._manager = manager
        self._publisher = publisher
        self._local: SentInOrder[dict[str, Any]] | None = SentInOrder(self._emit, "chat-emitter") if local else None

    async def __call__(self, message: dict[str, Any]) -> None:
        if self._local is not None:
            self._local.put(message)
        self._publisher.publish(self._manager.channel, self._manager.json.dumps(self._pubsub_emit(message)))

    async def _emit(self, batch: list[dict[str, Any]]) -> None:
        for message in batch:
            try:
                room = room_of(message["executionId"])
                await self._manager.emit(EVENT, message, namespace=NAMESPACE, room=room, ignore_queue=True)
            except Exception:
                log.warning("chat: emitting %s seq %s failed", message["executionId"], message["seq"], exc_info=True)

    def _pubsub_emit(self, message: dict[str, Any]) -> dict[str, Any]:
        return {
            "method": "emit",
            "event": EVENT,
            "data": [message],
            "binary": False,  # JSON from our own event rows
            "namespace": NAMESPACE,
            "room": room_of(message["executionId"]),
            "skip_sid": None,
            "callback": None,
            "host_id": self._manager.host_id,
        }

    async def close(self, timeout: float = 5.0) -> None:
        """Deliver to this process's rooms what was put so far (waiting at most `timeout` seconds). What went to
        Redis leaves when the publisher's owner closes it."""
        if self._local is not None:
            await self._local.flush(timeout)


class DirectWebSocket(eio_asgi.WebSocket):  # type: ignore[misc]
    """engine.io's ASGI websocket, which the room's events may also be written to directly.

    engine.io hands every packet to a socket's queue, and a writer task per socket waits on that queue through
    `asyncio.wait_for` (a new task on every wake) before writing. For a room of 1,000 watchers that is 1,000
    wakes and 1,000 new tasks per event, about half the web process's CPU in the fan-out, and the tasks live
    until the next event, long enough to reach the oldest GC generation: full collections ran every 1.5 s and
    stopped the loop for 100-600 ms, which was the paced p99 (bench/README.md). `deliver` writes a frame at
    once instead, without waiting and in order; engine.io's own packets (pings, answers) keep its queue.

    Relies on engine.io internals (the handler it passes is its socket's bound method; `server._async`;
    `socket.connected/closing/closed`; `server.sockets`): the version range is pinned in pyproject.toml.
    """

    def __init__(self, handler: Any, server: Any) -> None:
        super().__init__(handler, server)
        self._socket = getattr(handler, "__self__", None)
        # Frames that arrived while an earlier write waited for the transport (flow control); None when idle.
        self._backlog: deque[str | bytes] | None = None
        self._drainer: asyncio.Task[None] | None = None

    async def __call__(self, environ: dict[str, Any]) -> Any:
        socket = self._socket
        # Only a socket that is websocket from its handshake: one upgrading from polling may still have packets
        # in its queue for the polling transport, and those must not be overtaken.
        direct = socket is not None and not socket.connected
        if direct:
            _DIRECT[socket] = self
        try:
            return await super().__call__(environ)
        finally:
            if direct:
                _DIRECT.pop(socket, None)
            if self._drainer is not None:
                self._drainer.cancel()

    def deliver(self, frame: str | bytes) -> None:
        """Write a frame now, or after the frames already waiting for this socket; never waits itself, so one
        slow watcher holds up no other. A failure of an immediate write is raised to the caller."""
        if self._backlog is not None:
            self._backlog.append(frame)
            return
        sending = self.send(frame)
        try:
            # The ASGI send runs to its end here unless the server must wait before writing (uvicorn waits
            # while the transport has paused writing). That is the common case: no task, no wake-up.
            waiting_on = sending.send(None)
        except StopIteration:
            return
        except BaseException:
            sending.close()
            raise
        self._backlog = deque()
        self._drainer = asyncio.ensure_future(self._drain(sending, waiting_on))

    async def _drain(self, sending: Coroutine[Any, Any, None], waiting_on: Any) -> None:
        try:
            await _carry_on(sending, waiting_on)
            while self._backlog:
                await self.send(self._backlog.popleft())
        except Exception:
            log.info("chat: a watcher's socket failed while writing; its reader will close it", exc_info=True)
        finally:
            self._backlog = None
            self._drainer = None


@types.coroutine
def _carry_on(coro: Coroutine[Any, Any, None], waiting_on: Any) -> Generator[Any, Any, None]:
    """Finish, inside a task, a coroutine that was stepped by hand and stopped at `waiting_on`.

    It yields what the coroutine yielded, so the task waits on that, then passes on what the task sends or
    throws (cancellation) exactly as `await` would have."""
    while True:
        try:
            value = yield waiting_on
        except GeneratorExit:
            coro.close()
            raise
        except BaseException as exc:
            try:
                waiting_on = coro.throw(exc)
            except StopIteration:
                return
            continue
        try:
            waiting_on = coro.send(value)
        except StopIteration:
            return


# engine.io socket -> its websocket, for sockets that take direct writes; dropped with the socket.
_DIRECT: weakref.WeakKeyDictionary[Any, DirectWebSocket] = weakref.WeakKeyDictionary()


def _direct_to(sockets: dict[str, Any] | None, eio_sid: str) -> DirectWebSocket | None:
    socket = sockets.get(eio_sid) if sockets is not None else None
    if socket is None or socket.closing or socket.closed:
        return None
    return _DIRECT.get(socket)


class InTurnDelivery(socketio.AsyncManager):  # type: ignore[misc]
    """Local delivery to a room without a task per recipient.

    python-socketio's manager starts one asyncio task per recipient for every message and waits for them all;
    for a room of 1,000 watchers that bookkeeping, not the sending, is most of the cost. Handing a packet to a
    socket only puts it on that socket's unbounded queue, so doing it in turn is just as fair, keeps each
    watcher's order, and measured (bench/chat_fanout.py) four to five times the deliveries per second. A
    websocket's frames are written directly (DirectWebSocket), other transports' go through engine.io. One
    recipient's failure is logged and skips only that recipient. Emits with a callback keep the library's path.
    """

    def set_server(self, server: Any) -> None:
        super().set_server(server)
        eio: Any = getattr(server, "eio", None)
        drivers = getattr(eio, "_async", None)
        if isinstance(drivers, dict) and drivers.get("websocket") is eio_asgi.WebSocket:
            # A copy: the drivers table is engine.io's module-level dict, shared by every server in the process.
            eio._async = {**drivers, "websocket": DirectWebSocket}

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
        skip = skip_sid if isinstance(skip_sid, list) else [skip_sid]
        recipients = [(sid, eio_sid) for sid, eio_sid in self.get_participants(namespace, room) if sid not in skip]
        if not recipients:
            return  # most events of most executions: nobody is watching, nothing to encode
        args = list(data) if isinstance(data, tuple) else ([] if data is None else [data])
        # Encoded once for the whole room, as the library does.
        encoded = self.server.packet_class(sio_packet.EVENT, namespace=namespace, data=[event, *args]).encode()
        parts = encoded if isinstance(encoded, list) else [encoded]
        frames = [eio_packet.Packet(eio_packet.MESSAGE, part) for part in parts]
        wire = [frame.encode() for frame in frames]
        sockets = getattr(getattr(self.server, "eio", None), "sockets", None)
        for sid, eio_sid in recipients:
            ws = _direct_to(sockets, eio_sid)
            if ws is not None:
                try:
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

    Its listener keeps its subscription up as every other Redis subscription here does (core/reconnect.py).
    python-socketio's own loop logged an error on every failed attempt, waited up to a minute between them, never
    said when it was back, and left each lost subscription's connection open; and redis-py's retries, which
    resubscribe behind the caller's back, are off (no retries: a lost connection is raised, and counted here).
    """

    def __init__(self, url: str) -> None:
        super().__init__(url, redis_options={"retry": Retry(NoBackoff(), 0)})
        self._reconnecting = Reconnecting(
            "the chat's Socket.IO listener", "live events from other processes are missed (watchers catch up by seq)"
        )

    async def _redis_listen_with_retries(self) -> AsyncIterator[dict[str, Any]]:
        while True:
            if self.redis is None:
                self._redis_connect()
            # A pubsub of its own each time, on the one client's pool: the manager's publishes share that client.
            pubsub = self.pubsub = self.redis.pubsub(ignore_subscribe_messages=True)
            try:
                await pubsub.subscribe(self.channel)
                self._reconnecting.subscribed()
                async for message in pubsub.listen():
                    yield message
                raise RedisConnectionError("the subscription ended")  # listen() ends only once unsubscribed
            except Exception as exc:
                delay = self._reconnecting.failed(exc)
                with contextlib.suppress(Exception):
                    await pubsub.aclose()  # its connection, reconnected by redis-py on the way out, goes too
                await asyncio.sleep(delay)


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
