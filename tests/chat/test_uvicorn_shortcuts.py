"""What chat/_uvicorn_shortcuts.py relies on in uvicorn's `websockets-sansio` protocol and its server's main loop
(the module's text lists it): these fail when a new uvicorn (or websockets) changes it, before the chat's fan-out or
the web server does. pyproject.toml caps uvicorn below its next minor version for that module."""

from __future__ import annotations

import asyncio
import inspect
import itertools
import signal
import socket
from datetime import UTC, datetime, timedelta
from email.utils import parsedate_to_datetime
from typing import Any

import aiohttp
import pytest
import uvicorn
from uvicorn.protocols.websockets.websockets_sansio_impl import WebSocketsSansIOProtocol
from websockets.protocol import State
from websockets.server import ServerProtocol

from chat._uvicorn_shortcuts import TICK_SECONDS, OnceASecondServer, protocol_of, room_frame, write_frame


async def _lifespan(receive: Any, send: Any) -> None:
    while True:
        kind = (await receive())["type"]
        await send({"type": f"{kind}.complete"})
        if kind == "lifespan.shutdown":
            return


class App:
    """An ASGI app whose websocket, once accepted, is written to through the shortcut, then closed."""

    def __init__(self) -> None:
        self.found: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self.written: list[bool] = []
        self.go = asyncio.Event()

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            await _lifespan(receive, send)
            return
        assert scope["type"] == "websocket"
        await receive()  # websocket.connect
        await send({"type": "websocket.accept"})
        protocol = protocol_of(send)
        self.found.set_result(protocol)
        if protocol is not None:
            self.written.append(write_frame(protocol, room_frame("built once")))
            self.written.append(write_frame(protocol, room_frame(b"\x00\x01")))
        await self.go.wait()
        await send({"type": "websocket.close"})
        if protocol is not None:
            self.written.append(write_frame(protocol, room_frame("after close")))


async def _served(app: App, compress: int) -> tuple[Any, list[Any]]:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    sock.listen()  # the client's connection waits in the backlog until the server accepts it
    port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="on", ws="websockets-sansio"))
    serving = asyncio.create_task(server.serve(sockets=[sock]))
    try:
        received: list[Any] = []
        url = f"http://127.0.0.1:{port}/"
        async with aiohttp.ClientSession() as client, client.ws_connect(url, compress=compress) as ws:
            found = await app.found
            if found is not None:
                received.append((await ws.receive()).data)
                received.append((await ws.receive()).data)
            app.go.set()
            received.append((await ws.receive()).type)
        return found, received
    finally:
        server.should_exit = True
        await serving
        sock.close()


async def test_a_room_frame_reaches_an_uncompressed_watcher_as_uvicorns_send_would_write_it() -> None:
    app = App()
    found, received = await _served(app, compress=0)
    assert isinstance(found, WebSocketsSansIOProtocol)
    assert received == ["built once", b"\x00\x01", aiohttp.WSMsgType.CLOSE]
    assert app.written == [True, True, False]  # a closing connection is left to uvicorn's own send


async def test_a_compressed_watcher_keeps_uvicorns_send() -> None:
    app = App()
    found, received = await _served(app, compress=15)
    assert found is None
    assert received == [aiohttp.WSMsgType.CLOSE]


@pytest.mark.parametrize("message", ["short", "é" * 200, "x" * 70_000])
def test_the_room_frame_is_the_frame_websockets_writes_for_uvicorns_send(message: str) -> None:
    conn = ServerProtocol(state=State.OPEN)
    conn.send_text(message.encode())
    assert conn.data_to_send() == [room_frame(message)]


def test_uvicorns_send_checks_what_write_frame_checks_and_writes_the_connections_frame() -> None:
    source = inspect.getsource(WebSocketsSansIOProtocol.send)
    assert "await self.writable.wait()" in source
    assert "if self.disconnected:" in source
    assert "elif not self.close_sent and self.initial_response is None:" in source
    assert "self.conn.send_text(text_data.encode())" in source
    assert 'self.transport.write(b"".join(output))' in source
    assert "result = await self.app(self.scope, self.receive, self.send)" in inspect.getsource(
        WebSocketsSansIOProtocol.run_asgi
    )
    assert "self.writable.clear()" in inspect.getsource(WebSocketsSansIOProtocol.pause_writing)


def test_uvicorns_main_loop_ticks_to_notice_a_stop_and_refreshes_the_date_every_tenth_tick() -> None:
    main_loop, on_tick = inspect.getsource(uvicorn.Server.main_loop), inspect.getsource(uvicorn.Server.on_tick)
    assert "await asyncio.sleep(0.1)" in main_loop and "await self.on_tick(counter)" in main_loop
    assert "if counter % 10 == 0:" in on_tick and "default_headers" in on_tick and "if self.should_exit:" in on_tick
    assert "signal.signal(sig, self.handle_exit)" in inspect.getsource(uvicorn.Server.capture_signals)


async def _plain(scope: dict[str, Any], receive: Any, send: Any) -> None:
    if scope["type"] == "lifespan":
        await _lifespan(receive, send)
        return
    await send({"type": "http.response.start", "status": 204, "headers": []})
    await send({"type": "http.response.body", "body": b""})


async def test_the_server_ticks_once_a_second_with_a_fresh_date_and_stops_at_once_on_a_signal() -> None:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    sock.listen()
    server = OnceASecondServer(uvicorn.Config(_plain, log_level="warning", lifespan="on"))
    loop = asyncio.get_running_loop()
    ticks: list[float] = []
    two_intervals = asyncio.Event()  # the first tick, at start, and two more
    on_tick = server.on_tick

    async def counted(counter: int) -> bool:
        ticks.append(loop.time())
        if len(ticks) == 3:
            two_intervals.set()
        return await on_tick(counter)

    server.on_tick = counted  # type: ignore[method-assign]
    serving = asyncio.create_task(server.serve(sockets=[sock]))
    try:
        await two_intervals.wait()
        assert min(b - a for a, b in itertools.pairwise(ticks)) >= TICK_SECONDS * 0.9
        async with aiohttp.ClientSession() as client, client.get(f"http://127.0.0.1:{sock.getsockname()[1]}/") as got:
            assert got.status == 204
            assert parsedate_to_datetime(got.headers["Date"]) >= datetime.now(UTC) - timedelta(seconds=TICK_SECONDS + 1)
        stopping = loop.time()
        server.handle_exit(signal.SIGTERM, None)
        server._captured_signals.clear()  # uvicorn raises again the signals it handled once it stops: not in pytest
        await serving
        assert loop.time() - stopping < TICK_SECONDS / 2  # woken by the signal, not by the next tick
    finally:
        server.should_exit = True
        await serving
        sock.close()
