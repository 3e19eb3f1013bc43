"""Every use of uvicorn's internals, in one place: writing a room's websocket frame, built once, to each watcher's
transport; and a server that wakes once a second when idle, not ten times (`OnceASecondServer`).

Past engine.io (chat/_engineio_shortcuts.py), each delivery still went through the ASGI send of uvicorn's
websocket protocol: a coroutine, the `websockets` connection building and serialising the same frame again for
every watcher, then the transport's write. For a watcher whose connection negotiated no extension (no
compression), the frame's bytes are the same for everyone: they are serialised once per broadcast (`room_frame`,
through `websockets`' public `Frame.serialize`) and written to each transport as uvicorn's send would write them,
after the same checks. Kept because the bench's alternating pairs show it buys more than 30 % on the uncompressed
fan-out's deliveries per second (bench/README.md, issue 25); uvicorn has no public way to do it. A watcher whose
connection compresses, or that is not in a state to be written to now, keeps the ASGI send.

What it relies on, as read in uvicorn 0.54 with websockets 17 (pyproject.toml caps uvicorn below 0.55 for this
module; read this code again before widening the range), each pinned by tests/chat/test_library_shortcuts.py:

- the ASGI `send` uvicorn's `websockets-sansio` protocol gives the application is its bound method `send`, so
  `send.__self__` is the `WebSocketsSansIOProtocol`;
- that protocol's `transport`, `writable` (an `asyncio.Event`, cleared while the transport paused writing),
  `handshake_complete`, `close_sent`, `disconnected`, `initial_response`, and `conn` (a `websockets`
  `ServerProtocol`, with `state` and `extensions`);
- that `send` of a `websocket.send` message with `text`, once open, writes
  `conn.send_text(text.encode())`'s output: one unmasked, final TEXT frame (the frame built here).
"""

from __future__ import annotations

import asyncio
import contextlib
from types import FrameType
from typing import Any

import uvicorn
from uvicorn.protocols.websockets.websockets_sansio_impl import WebSocketsSansIOProtocol
from websockets.frames import Frame, Opcode
from websockets.protocol import State


def protocol_of(asgi_send: Any) -> WebSocketsSansIOProtocol | None:
    """The uvicorn websocket protocol behind an ASGI `send`, when its frames may be written directly: no
    extension negotiated (a compressed connection needs a frame of its own). None otherwise."""
    protocol = getattr(asgi_send, "__self__", None)
    if not isinstance(protocol, WebSocketsSansIOProtocol) or not protocol.handshake_complete:
        return None
    if protocol.conn.extensions:
        return None
    return protocol


def room_frame(message: str | bytes) -> bytes:
    """A message as the websocket frame a server writes (final, unmasked; text, or binary for bytes), as uvicorn's
    send has `websockets` build it: built once for a whole room."""
    if isinstance(message, bytes):
        return Frame(Opcode.BINARY, message).serialize(mask=False)
    return Frame(Opcode.TEXT, message.encode()).serialize(mask=False)


def write_frame(protocol: WebSocketsSansIOProtocol, frame: bytes) -> bool:
    """Write `frame` (one or more whole frames, back to back: what uvicorn's send writes when `websockets` gives it
    several) as uvicorn's send would, when it could now without waiting; False when it could not (the transport
    paused writing, the connection is closing or closed): the caller then takes the ASGI send."""
    if (
        not protocol.writable.is_set()
        or protocol.disconnected
        or protocol.close_sent
        or protocol.initial_response is not None
        or protocol.conn.state is not State.OPEN
        or protocol.transport.is_closing()
    ):
        return False
    protocol.transport.write(frame)
    return True


# How often an idle server wakes: the Date header it sends has whole seconds.
TICK_SECONDS = 1.0


class OnceASecondServer(uvicorn.Server):
    """uvicorn's server, waking once a second to tick, where uvicorn's `main_loop` wakes ten times: it sleeps 0.1 s
    between ticks only to notice a stop signal soon. Here the signal's handler wakes the loop instead.

    Each wake-up of an idle process costs this kind of virtual machine about 0.2 ms of CPU: the web process idled at
    2.0 ms of CPU a second on PostgreSQL, 0.5 ms with this (4.4 and 2.5 ms embedded), and every paced approval paid
    its share (bench figure `idle-processes`, bench/README.md, issue 25).
    What it relies on, as read in uvicorn 0.54 (pinned by tests/chat/test_uvicorn_shortcuts.py): `main_loop` runs
    `on_tick(counter)` until it answers True, `on_tick` refreshes the Date header when `counter % 10 == 0`, and the
    stop signals go to `handle_exit`. A stop asked by setting `should_exit` alone is seen within a tick.
    """

    _woken: asyncio.Event | None = None
    _loop: asyncio.AbstractEventLoop | None = None

    async def main_loop(self) -> None:
        self._loop, self._woken = asyncio.get_running_loop(), asyncio.Event()
        counter = 0
        while not await self.on_tick(counter):
            counter = (counter + 10) % 864000  # every tick is a tenth tick of uvicorn's: the Date header is refreshed
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._woken.wait(), TICK_SECONDS)

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        super().handle_exit(sig, frame)
        if self._loop is not None and self._woken is not None:
            # Called by a signal handler, between any two bytecodes of the loop's thread: the loop sets it itself.
            self._loop.call_soon_threadsafe(self._woken.set)
