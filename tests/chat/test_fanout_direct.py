"""chat.fanout's direct websocket writes: at once when the server can write, in order and without holding up
the rest of the room when it must wait, and engine.io's own path for sockets that are not direct."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import socketio

from chat._engineio_shortcuts import DirectWebSocket
from chat._socketio_shortcuts import InTurnDelivery
from chat.fanout import EVENT, NAMESPACE, room_of


class Asgi:
    """An ASGI websocket's send: records text frames; `gate`, while unset, makes a send wait (flow control)."""

    def __init__(self) -> None:
        self.frames: list[str] = []
        self.gate = asyncio.Event()
        self.gate.set()
        self.waiting = 0
        self.got: dict[int, asyncio.Future[None]] = {}

    async def send(self, message: dict[str, Any]) -> None:
        if message["type"] != "websocket.send":
            return
        if not self.gate.is_set():
            self.waiting += 1
            await self.gate.wait()
        self.frames.append(message["text"])
        found = self.got.get(len(self.frames))
        if found is not None and not found.done():
            found.set_result(None)

    async def receive(self) -> dict[str, Any]:
        await asyncio.get_running_loop().create_future()  # never: the client says nothing
        raise AssertionError

    def until(self, count: int) -> asyncio.Future[None]:
        future = self.got.setdefault(count, asyncio.get_running_loop().create_future())
        if len(self.frames) >= count:
            future.set_result(None)
        return future


class EioSocket:
    """What DirectWebSocket reads of an engine.io socket; its handler holds the connection open."""

    def __init__(self) -> None:
        self.connected = self.closing = self.closed = False
        self.entered: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.release: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    async def _websocket_handler(self, ws: Any) -> None:
        self.connected = True
        self.entered.set_result(None)
        await self.release


async def open_direct(socket: EioSocket, asgi: Asgi) -> tuple[DirectWebSocket, asyncio.Task[Any]]:
    ws = DirectWebSocket(socket._websocket_handler, None)
    task = asyncio.ensure_future(ws({"asgi.receive": asgi.receive, "asgi.send": asgi.send}))
    await socket.entered
    return ws, task


async def test_a_frame_is_written_before_deliver_returns() -> None:
    asgi, socket = Asgi(), EioSocket()
    ws, task = await open_direct(socket, asgi)
    ws.deliver("4one")
    ws.deliver("4two")
    assert asgi.frames == ["4one", "4two"]  # no await in between: no task, no wake-up
    socket.release.set_result(None)
    await task


async def test_a_waiting_write_keeps_order_and_holds_up_nothing_else() -> None:
    asgi, socket = Asgi(), EioSocket()
    ws, task = await open_direct(socket, asgi)
    asgi.gate.clear()  # the transport has paused writing
    for n in range(1, 4):
        ws.deliver(f"4frame{n}")  # returns although the first write waits
    assert asgi.frames == [] and asgi.waiting == 1
    asgi.gate.set()
    await asgi.until(3)
    assert asgi.frames == ["4frame1", "4frame2", "4frame3"]
    ws.deliver("4frame4")  # idle again: written at once
    assert asgi.frames[-1] == "4frame4"
    socket.release.set_result(None)
    await task


class Server:
    packet_class = socketio.packet.Packet

    def __init__(self, sockets: dict[str, Any]) -> None:
        self.sent: list[tuple[str, str]] = []
        self.eio = _Eio(sockets)

    async def _send_eio_packet(self, eio_sid: str, frame: Any) -> None:
        self.sent.append((eio_sid, frame.data))


class _Eio:
    def __init__(self, sockets: dict[str, Any]) -> None:
        self.sockets = sockets
        self.count = 0

    def generate_id(self) -> str:
        self.count += 1
        return f"sid{self.count}"


async def test_the_room_goes_direct_to_websockets_and_through_engineio_otherwise() -> None:
    asgi, direct = Asgi(), EioSocket()
    _, task = await open_direct(direct, asgi)
    polling = EioSocket()  # never opened as a direct websocket
    server = Server({"ws": direct, "poll": polling})
    manager = InTurnDelivery()
    manager.set_server(server)
    for eio_sid in ("ws", "poll"):
        sid = await manager.connect(eio_sid, NAMESPACE)
        await manager.enter_room(sid, NAMESPACE, room_of("exe_1"))
    for seq in (1, 2):
        await manager.emit(EVENT, {"seq": seq}, namespace=NAMESPACE, room=room_of("exe_1"))

    assert [json.loads(frame.split(",", 1)[1])[1]["seq"] for frame in asgi.frames] == [1, 2]
    assert all(frame.startswith("42/chat,") for frame in asgi.frames)
    assert [(eio_sid, json.loads(data.split(",", 1)[1])[1]["seq"]) for eio_sid, data in server.sent] == [
        ("poll", 1),
        ("poll", 2),
    ]
    direct.closing = True  # closing: back to engine.io, which knows what to do with it
    await manager.emit(EVENT, {"seq": 3}, namespace=NAMESPACE, room=room_of("exe_1"))
    assert len(asgi.frames) == 2
    assert sorted(eio_sid for eio_sid, _ in server.sent[-2:]) == ["poll", "ws"]
    direct.release.set_result(None)
    await task
