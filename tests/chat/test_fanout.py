"""chat.fanout's local delivery: every recipient in turn, in order, one failure costing only that recipient."""

from __future__ import annotations

import json
from typing import Any

import socketio

from chat._socketio_shortcuts import InTurnDelivery
from chat.fanout import EVENT, NAMESPACE, RoomSink, room_of


class FakeServer:
    """Just what the manager uses of a server: the packet class and the raw send."""

    packet_class = socketio.packet.Packet

    def __init__(self) -> None:
        self.sent: list[tuple[str, Any]] = []
        self.eio = _Ids()

    async def _send_eio_packet(self, eio_sid: str, frame: Any) -> None:
        if eio_sid == "broken":
            raise ConnectionResetError("gone")
        self.sent.append((eio_sid, frame.data))


async def test_every_watcher_gets_each_message_in_order_despite_a_broken_one() -> None:
    server = FakeServer()
    manager = InTurnDelivery()
    manager.set_server(server)
    for eio_sid in ("a", "broken", "b"):
        sid = await manager.connect(eio_sid, NAMESPACE)
        await manager.enter_room(sid, NAMESPACE, room_of("exe_1"))
    outsider = await manager.connect("c", NAMESPACE)
    await manager.enter_room(outsider, NAMESPACE, room_of("exe_2"))
    sink = RoomSink(_Emitting(manager))
    for seq in (1, 2):
        await sink({"executionId": "exe_1", "seq": seq})

    received = [(eio_sid, json.loads(data.split(",", 1)[1])) for eio_sid, data in server.sent]
    assert sorted(received, key=lambda r: r[0]) == [
        ("a", [EVENT, {"executionId": "exe_1", "seq": 1}]),
        ("a", [EVENT, {"executionId": "exe_1", "seq": 2}]),
        ("b", [EVENT, {"executionId": "exe_1", "seq": 1}]),
        ("b", [EVENT, {"executionId": "exe_1", "seq": 2}]),
    ]
    assert [r[1][1]["seq"] for r in received if r[0] == "b"] == [1, 2]


class _Ids:
    def __init__(self) -> None:
        self.count = 0

    def generate_id(self) -> str:
        self.count += 1
        return f"sid{self.count}"


class _Emitting:
    """An AsyncServer's emit, reduced to the manager call it makes."""

    def __init__(self, manager: InTurnDelivery) -> None:
        self.manager = manager

    async def emit(self, event: str, data: Any, *, namespace: str, room: str) -> None:
        await self.manager.emit(event, data, namespace=namespace, room=room)
