"""Every use of python-engineio's internals, in one place: writing a room's frames straight to each watcher's
websocket.

engine.io hands every packet to a socket's queue, and a writer task per socket waits on that queue through
`asyncio.wait_for` (a new task on every wake) before writing. For a room of 1,000 watchers that was 1,000 wakes
and 1,000 new tasks per event, about half the web process's CPU in the fan-out, and the tasks lived long enough to
reach the oldest GC generation: full collections stopped the loop for 100-600 ms, the paced p99. Writing directly
is kept because the bench's alternating pairs show it buys more than 30 % on the chat fan-out's figures
(bench/README.md, issue 21); engine.io has no public way to do it.

What it relies on, as read in python-engineio 4.15 (pyproject.toml caps it below 4.16 for this module; read this
code again before widening the range), each pinned by tests/chat/test_library_shortcuts.py:

- `engineio.async_drivers.asgi.WebSocket(handler, server)`, awaited with the environ, with a `send(frame)`
  coroutine that performs the ASGI send; the handler engine.io passes is a bound method of its `AsyncSocket`;
- `AsyncServer._async["websocket"]`: the class engine.io instantiates for each websocket (the module-level
  drivers table, copied here before replacing it);
- `AsyncServer.sockets` (engine.io sid -> socket) and `AsyncSocket.connected / closing / closed`;
- `engineio.packet.Packet(MESSAGE, data).encode()`: a MESSAGE frame as engine.io writes it.
"""

from __future__ import annotations

import asyncio
import logging
import weakref
from collections import deque
from collections.abc import Coroutine
from typing import Any

from engineio import packet as eio_packet  # type: ignore[import-untyped]
from engineio.async_drivers import asgi as eio_asgi  # type: ignore[import-untyped]

from core.coroutines import carry_on

log = logging.getLogger("chat.fanout")

Packet = eio_packet.Packet
MESSAGE = eio_packet.MESSAGE


class DirectWebSocket(eio_asgi.WebSocket):  # type: ignore[misc]
    """engine.io's ASGI websocket, which the room's events may also be written to directly.

    engine.io hands every packet to a socket's queue, and a writer task per socket waits on that queue through
    `asyncio.wait_for` (a new task on every wake) before writing. For a room of 1,000 watchers that is 1,000
    wakes and 1,000 new tasks per event, about half the web process's CPU in the fan-out, and the tasks live
    until the next event, long enough to reach the oldest GC generation: full collections ran every 1.5 s and
    stopped the loop for 100-600 ms, which was the paced p99 (bench/README.md). `deliver` writes a frame at
    once instead, without waiting and in order; engine.io's own packets (pings, answers) keep its queue.

    """

    def __init__(self, handler: Any, server: Any) -> None:
        super().__init__(handler, server)
        self._socket = getattr(handler, "__self__", None)
        # Frames that arrived while an earlier write waited for the transport (flow control); None when idle.
        self._backlog: deque[str | bytes] | None = None
        self._drainer: asyncio.Task[None] | None = None
        # The server's websocket protocol, when a room's frame built once may be written to it directly
        # (chat/_uvicorn_shortcuts.py); False once known that it may not (a compressed connection).
        self._protocol: Any = None
        # Whether a room's frame went out in this turn of the loop, and the frames kept since for one write as
        # it ends (`deliver_in_turn`), with the room's websocket frames of them. Lists kept and emptied, not made
        # each turn: objects made per watcher per message that outlive a collection of the youngest generation
        # push the collector into full collections, which stop the loop.
        self._in_turn = False
        self._held: list[str | bytes] = []
        self._held_room: list[bytes] = []

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

    def takes_room_frames(self) -> bool:
        """Whether `deliver` may be given the room's websocket frame, built once (`room_frame`), to write as it is:
        a connection that negotiated no compression, under uvicorn's sans-I/O websocket protocol."""
        if self._protocol is None and self.asgi_send is not None:
            from chat._uvicorn_shortcuts import protocol_of  # the web process's only: the worker never loads uvicorn

            found = protocol_of(self.asgi_send)
            if found is not None:
                self._protocol = found
            elif getattr(getattr(self.asgi_send, "__self__", None), "handshake_complete", True):
                self._protocol = False  # settled: this connection's frames are its own
        return bool(self._protocol)

    def deliver(self, frame: str | bytes, room_frame: bytes | None = None) -> None:
        """Write a frame now, or after the frames already waiting for this socket; never waits itself, so one
        slow watcher holds up no other. A failure of an immediate write is raised to the caller. `room_frame`,
        where `takes_room_frames`: the same frame as the websocket writes it, built once for the room."""
        if self._backlog is not None:
            self._backlog.append(frame)
            return
        if room_frame is not None and self._protocol:
            from chat._uvicorn_shortcuts import write_frame

            if write_frame(self._protocol, room_frame):
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

    def deliver_in_turn(self, frame: str | bytes, room_frame: bytes) -> bool:
        """Deliver a room's frame (where `takes_room_frames`): the turn's first at once, as `deliver` does; the
        rest of the loop's turn kept for one write when it ends (`end_turn`). True for the first, when the caller
        must see that `end_turn` follows."""
        if not self._in_turn:
            self.deliver(frame, room_frame)
            self._in_turn = True
            return True
        self._held.append(frame)
        self._held_room.append(room_frame)
        return False

    def end_turn(self) -> None:
        """Write what `deliver_in_turn` kept: in one write when the server can write now, else each frame as
        `deliver` does (in order, behind what already waits); nothing for a socket that closed since. A failure
        of an immediate write is raised to the caller."""
        held, room = self._held, self._held_room
        self._in_turn = False
        if not held:
            return
        try:
            socket = self._socket
            if socket is None or socket.closing or socket.closed:
                return
            if self._backlog is None and self._protocol:
                from chat._uvicorn_shortcuts import write_frame

                if write_frame(self._protocol, room[0] if len(room) == 1 else b"".join(room)):
                    return
            for frame, whole in zip(held, room, strict=True):
                self.deliver(frame, whole)
        finally:
            held.clear()
            room.clear()

    async def _drain(self, sending: Coroutine[Any, Any, None], waiting_on: Any) -> None:
        try:
            await carry_on(sending, waiting_on)
            while self._backlog:
                await self.send(self._backlog.popleft())
        except Exception:
            log.info("chat: a watcher's socket failed while writing; its reader will close it", exc_info=True)
        finally:
            self._backlog = None
            self._drainer = None


# engine.io socket -> its websocket, for sockets that take direct writes; dropped with the socket.
_DIRECT: weakref.WeakKeyDictionary[Any, DirectWebSocket] = weakref.WeakKeyDictionary()


def use_direct_websockets(eio: Any) -> None:
    """Make `eio` (an engine.io AsyncServer on ASGI) open its websockets as `DirectWebSocket`s."""
    drivers = getattr(eio, "_async", None)
    if isinstance(drivers, dict) and drivers.get("websocket") is eio_asgi.WebSocket:
        # A copy: the drivers table is engine.io's module-level dict, shared by every server in the process.
        eio._async = {**drivers, "websocket": DirectWebSocket}


def direct_to(eio: Any, eio_sid: str) -> DirectWebSocket | None:
    """The websocket that takes direct writes for this engine.io session, if it does."""
    sockets = getattr(eio, "sockets", None)
    socket = sockets.get(eio_sid) if isinstance(sockets, dict) else None
    if socket is None or socket.closing or socket.closed:
        return None
    return _DIRECT.get(socket)
