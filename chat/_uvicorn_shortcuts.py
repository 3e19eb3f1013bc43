"""Every use of uvicorn's internals, in one place: writing a room's websocket frame, built once, to each watcher's
transport; and a server that does not wake while idle, where uvicorn's wakes ten times a second (`QuietServer`).

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
import time
from email.utils import formatdate
from typing import Any

import uvicorn
from uvicorn.protocols.websockets.websockets_sansio_impl import WebSocketsSansIOProtocol
from uvicorn.server import ServerState
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


class _DateOnDemand(ServerState):
    """uvicorn's state shared by its connections, whose `default_headers` (the Date header, then the configured
    ones) are made when a request reads them in a new second, instead of by the server's tick."""

    def __init__(self, config: uvicorn.Config) -> None:
        super().__init__()
        self._config = config
        self._second = -1
        self._headers: list[tuple[bytes, bytes]] = []

    @property
    def default_headers(self) -> list[tuple[bytes, bytes]]:
        second = int(time.time())
        if second != self._second:
            date = [(b"date", formatdate(second, usegmt=True).encode())] if self._config.date_header else []
            self._headers, self._second = date + self._config.encoded_headers, second
        return self._headers

    @default_headers.setter
    def default_headers(self, _headers: list[tuple[bytes, bytes]]) -> None:
        """uvicorn assigns them at start and at a tick; made above instead, they are not kept."""


class QuietServer(uvicorn.Server):
    """uvicorn's server, with no tick while it runs: uvicorn's `main_loop` wakes ten times a second, to refresh the
    Date header once a second and to notice a stop soon. Here the header is made when a response asks for it
    (`_DateOnDemand`), and a stop (a signal, or `should_exit` set from any thread) wakes the loop. An idle web
    process then wakes only for what it has to do.

    On this kind of virtual machine a wake-up of an idle process costs far more than the work it wakes for (0.2 ms
    of CPU on one VM, 4-12 ms after a second's sleep on another), and a process woken by its tick is also the one a
    decision wakes next: bench figure `idle-processes` and bench/README.md (issue 25).
    What it relies on, as read in uvicorn 0.54 (pinned by tests/chat/test_uvicorn_shortcuts.py): the server's
    connections read `server_state.default_headers` for every response, `main_loop` runs `on_tick(counter)` until
    it answers True and refreshes the header only when `counter % 10 == 0`, `on_tick` answers `should_exit`, and
    the stop signals go to `handle_exit`, which sets `should_exit`. A server that limits its requests
    (`limit_max_requests`) or reports to a supervisor (`callback_notify`) keeps uvicorn's ticking loop, which
    those need.
    """

    _woken: asyncio.Event | None = None
    _loop: asyncio.AbstractEventLoop | None = None
    _should_exit = False

    def __init__(self, config: uvicorn.Config) -> None:
        super().__init__(config)
        self.server_state = _DateOnDemand(config)

    @property
    def should_exit(self) -> bool:
        return self._should_exit

    @should_exit.setter
    def should_exit(self, value: bool) -> None:
        self._should_exit = value
        if value and self._loop is not None and self._woken is not None:
            # From a signal handler (between any two bytecodes of the loop's thread) or another thread.
            self._loop.call_soon_threadsafe(self._woken.set)

    async def main_loop(self) -> None:
        if self.config.limit_max_requests is not None or self.config.callback_notify is not None:
            await super().main_loop()
            return
        self._loop, self._woken = asyncio.get_running_loop(), asyncio.Event()
        # 1: not a tenth tick, so on_tick leaves the header to _DateOnDemand and only answers whether to stop.
        while not await self.on_tick(1):
            await self._woken.wait()
            self._woken.clear()
