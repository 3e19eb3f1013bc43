"""A room's frames reach an uncompressed watcher in two writes per turn of the loop, in order: the first at once,
the rest together as the turn ends; a watcher that cannot be written to now gets them through uvicorn's send, still
in order. Real uvicorn, real sockets."""

from __future__ import annotations

import asyncio
import json
import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import aiohttp
import socketio
import uvicorn
from uvicorn.protocols.websockets.websockets_sansio_impl import WebSocketsSansIOProtocol

from chat._socketio_shortcuts import InTurnDelivery
from chat.fanout import EVENT, NAMESPACE, room_of

ROOM = room_of("exe_1")


class CountingTransport:
    """A transport that notes each write it passes on: what the kernel is asked to send, one call at a time."""

    def __init__(self, transport: Any) -> None:
        self.transport = transport
        self.writes: list[bytes] = []

    def write(self, data: bytes) -> None:
        self.writes.append(bytes(data))
        self.transport.write(data)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.transport, name)


@dataclass
class Served:
    sio: socketio.AsyncServer
    watcher: aiohttp.ClientWebSocketResponse
    protocol: WebSocketsSansIOProtocol
    transport: CountingTransport

    async def emit(self, *seqs: int) -> None:
        for seq in seqs:  # no await suspends in between: one turn of the loop
            await self.sio.emit(EVENT, {"seq": seq}, namespace=NAMESPACE, room=ROOM)

    async def seqs(self, count: int) -> list[int]:
        found: list[int] = []
        while len(found) < count:
            text = await asyncio.wait_for(self.watcher.receive_str(), 10)
            if text.startswith("42/chat,"):
                found.append(json.loads(text.split(",", 1)[1])[1]["seq"])
        return found


@asynccontextmanager
async def served() -> AsyncIterator[Served]:
    sio = socketio.AsyncServer(async_mode="asgi", client_manager=InTurnDelivery(), transports=["websocket"])

    @sio.on("connect", namespace=NAMESPACE)  # type: ignore[untyped-decorator]
    async def connect(sid: str, environ: dict[str, Any], auth: Any = None) -> None:
        await sio.enter_room(sid, ROOM, namespace=NAMESPACE)

    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    sock.listen()
    port = sock.getsockname()[1]
    config = uvicorn.Config(socketio.ASGIApp(sio), log_level="warning", lifespan="off", ws="websockets-sansio")
    server = uvicorn.Server(config)
    serving = asyncio.create_task(server.serve(sockets=[sock]))
    try:
        url = f"http://127.0.0.1:{port}/socket.io/?EIO=4&transport=websocket"
        async with aiohttp.ClientSession() as client, client.ws_connect(url, compress=0) as watcher:
            assert (await watcher.receive_str()).startswith("0")
            await watcher.send_str("40/chat,{}")
            assert (await watcher.receive_str()).startswith("40/chat,")
            (protocol,) = [p for p in server.server_state.connections if isinstance(p, WebSocketsSansIOProtocol)]
            transport = CountingTransport(protocol.transport)
            protocol.transport = transport  # type: ignore[assignment]
            yield Served(sio, watcher, protocol, transport)
    finally:
        server.should_exit = True
        await serving
        sock.close()


async def end_of_turn() -> None:
    """Return once the callbacks already scheduled on the loop have run (the loop runs them in order)."""
    done = asyncio.get_running_loop().create_future()
    asyncio.get_running_loop().call_soon(done.set_result, None)
    await done


async def test_a_turns_first_frame_leaves_at_once_and_the_rest_in_one_write_in_order() -> None:
    async with served() as s:
        await s.emit(1)
        assert [w.count(b"42/chat,") for w in s.transport.writes] == [1]  # before the turn ends
        await s.emit(*range(2, 11))
        assert await s.seqs(10) == list(range(1, 11))
        assert [w.count(b"42/chat,") for w in s.transport.writes] == [1, 9]

        await s.emit(11)  # a later turn: at once again
        assert [w.count(b"42/chat,") for w in s.transport.writes] == [1, 9, 1]
        assert await s.seqs(1) == [11]


async def test_a_watcher_that_cannot_be_written_to_now_gets_the_turns_frames_in_order_later() -> None:
    async with served() as s:
        s.protocol.pause_writing()  # its socket's buffer is full, as asyncio says
        await s.emit(1, 2, 3)
        await end_of_turn()
        assert s.transport.writes == []  # behind uvicorn's send, which waits to be writable
        s.protocol.resume_writing()
        await s.emit(4)
        assert await s.seqs(4) == [1, 2, 3, 4]
