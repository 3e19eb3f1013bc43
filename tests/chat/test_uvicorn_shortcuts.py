"""What chat/_uvicorn_shortcuts.py relies on in uvicorn's `websockets-sansio` protocol and its server's main loop
(the module's text lists it): these fail when a new uvicorn (or websockets) changes it, before the chat's fan-out or
the web server does. pyproject.toml caps uvicorn below its next minor version for that module."""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import signal
import socket
import sys
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from typing import Any

import aiohttp
import pytest
import uvicorn
from uvicorn.protocols.http.h11_impl import H11Protocol
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
from uvicorn.protocols.websockets.websockets_sansio_impl import WebSocketsSansIOProtocol
from websockets.protocol import State
from websockets.server import ServerProtocol

from chat._uvicorn_shortcuts import QuietServer, protocol_of, room_frame, write_frame


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


@contextlib.asynccontextmanager
async def _serving(server: uvicorn.Server) -> AsyncIterator[tuple[int, asyncio.Task[None]]]:
    """`server` serving on a free port of 127.0.0.1: the port, and its `serve` task; stopped on the way out."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    sock.listen()  # the client's connection waits in the backlog until the server accepts it
    serving = asyncio.create_task(server.serve(sockets=[sock]))
    try:
        yield sock.getsockname()[1], serving
    finally:
        server.should_exit = True
        await serving
        sock.close()


async def _served(app: App, compress: int) -> tuple[Any, list[Any]]:
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="on", ws="websockets-sansio"))
    async with _serving(server) as (port, _):
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


def test_uvicorns_server_reads_the_default_headers_per_response_and_ticks_to_refresh_them() -> None:
    main_loop, on_tick = inspect.getsource(uvicorn.Server.main_loop), inspect.getsource(uvicorn.Server.on_tick)
    assert "await self.on_tick(counter)" in main_loop
    assert "if counter % 10 == 0:" in on_tick and "self.server_state.default_headers = " in on_tick
    assert "if self.should_exit:" in on_tick and "return True" in on_tick
    assert "self.server_state = ServerState()" in inspect.getsource(uvicorn.Server.__init__)
    assert "signal.signal(sig, self.handle_exit)" in inspect.getsource(uvicorn.Server.capture_signals)
    # That `handle_exit` sets `should_exit` is checked by its effect below: sse_starlette (the mcp SDK's) wraps it.
    for cycle in (H11Protocol, HttpToolsProtocol):
        assert "default_headers=self.server_state.default_headers" in inspect.getsource(cycle)


async def _plain(scope: dict[str, Any], receive: Any, send: Any) -> None:
    if scope["type"] == "lifespan":
        await _lifespan(receive, send)
        return
    await send({"type": "http.response.start", "status": 204, "headers": []})
    await send({"type": "http.response.body", "body": b""})


async def _dates(port: int, count: int) -> list[datetime]:
    dates = []
    async with aiohttp.ClientSession() as client:
        for _ in range(count):
            async with client.get(f"http://127.0.0.1:{port}/") as got:
                assert got.status == 204
                dates.append(parsedate_to_datetime(got.headers["Date"]))
    return dates


async def test_the_idle_server_does_not_tick_its_date_is_fresh_and_a_signal_stops_it_at_once() -> None:
    server = QuietServer(uvicorn.Config(_plain, log_level="warning", lifespan="on", headers=[("x-kept", "1")]))
    loop = asyncio.get_running_loop()
    ticks: list[int] = []
    on_tick = server.on_tick

    async def counted(counter: int) -> bool:
        ticks.append(counter)
        return await on_tick(counter)

    server.on_tick = counted  # type: ignore[method-assign]
    try:
        async with _serving(server) as (port, serving):
            before = datetime.now(UTC).replace(microsecond=0)
            first = await _dates(port, 3)
            # Across a change of second, with no tick between: the header is made when the response asks for it.
            # The sleep is the passage of time under test, not a wait for something to happen.
            await asyncio.sleep(1.1)
            second = await _dates(port, 1)
            after = datetime.now(UTC)
            assert all(before <= d <= after for d in first + second) and second[0] > first[0]
            assert ticks == [1]  # the one look at start, whether to stop: none since, requests or not
            async with aiohttp.ClientSession() as client, client.get(f"http://127.0.0.1:{port}/") as got:
                assert got.headers["x-kept"] == "1"
            stopping = loop.time()
            server.handle_exit(signal.SIGTERM, None)
            server._captured_signals.clear()  # uvicorn raises again the signals it handled once it stops: not here
            await serving
            assert loop.time() - stopping < 0.5  # woken by the signal
    finally:
        # sse_starlette (loaded with the mcp SDK) wraps uvicorn's handle_exit and sets a flag of its own that ends
        # every SSE stream of the process from then on: in a test process, later tests' streams.
        sse = sys.modules.get("sse_starlette.sse")
        if sse is not None:
            sse.AppStatus.should_exit = False


async def test_should_exit_set_from_another_thread_stops_the_idle_server() -> None:
    server = QuietServer(uvicorn.Config(_plain, log_level="warning", lifespan="on"))
    async with _serving(server) as (port, serving):
        await _dates(port, 1)  # answered: started, its main loop waiting
        await asyncio.to_thread(setattr, server, "should_exit", True)
        async with asyncio.timeout(5):  # with no tick, only the setter's wake-up can end it
            await serving


async def test_a_server_limiting_its_requests_keeps_uvicorns_ticking_loop() -> None:
    server = QuietServer(uvicorn.Config(_plain, log_level="warning", lifespan="on", limit_max_requests=2))
    async with _serving(server) as (port, serving):
        await _dates(port, 2)
        async with asyncio.timeout(5):  # uvicorn's tick sees the count reached and stops the server
            await serving
