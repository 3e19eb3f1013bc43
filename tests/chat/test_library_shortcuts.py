"""What chat/_engineio_shortcuts.py and chat/_socketio_shortcuts.py rely on in python-engineio and python-socketio
(each module's text lists it): these fail when a new version of either library changes it, before the chat does.
pyproject.toml caps both libraries below their next minor version for these modules."""

from __future__ import annotations

import inspect
from typing import Any

import engineio  # type: ignore[import-untyped]
import socketio
from engineio import packet as eio_packet  # type: ignore[import-untyped]
from engineio.async_drivers import asgi as eio_asgi  # type: ignore[import-untyped]
from engineio.async_socket import AsyncSocket  # type: ignore[import-untyped]
from socketio.async_pubsub_manager import AsyncPubSubManager

from chat._engineio_shortcuts import DirectWebSocket, direct_to, use_direct_websockets
from chat._socketio_shortcuts import InTurnDelivery, RedisInTurnDelivery, pubsub_emit


def test_engineio_opens_websockets_through_its_drivers_table_and_passes_a_sockets_bound_handler() -> None:
    server = engineio.AsyncServer(async_mode="asgi")
    assert server._async["websocket"] is eio_asgi.WebSocket
    assert list(inspect.signature(eio_asgi.WebSocket.__init__).parameters) == ["self", "handler", "server"]
    assert inspect.iscoroutinefunction(eio_asgi.WebSocket.send)
    assert inspect.iscoroutinefunction(eio_asgi.WebSocket.__call__)
    # The handler engine.io hands the websocket is its socket's bound method.
    source = inspect.getsource(AsyncSocket._upgrade_websocket)
    assert "self._websocket_handler" in source and "self.server._async['websocket']" in source
    use_direct_websockets(server)
    assert server._async["websocket"] is DirectWebSocket
    assert engineio.AsyncServer(async_mode="asgi")._async["websocket"] is eio_asgi.WebSocket  # a copy was changed


def test_engineio_sockets_by_sid_with_their_state() -> None:
    server = engineio.AsyncServer(async_mode="asgi")
    socket = AsyncSocket(server, "sid-1")
    server.sockets["sid-1"] = socket
    assert (socket.connected, socket.closing, socket.closed) == (False, False, False)
    assert direct_to(server, "sid-1") is None  # not a direct websocket
    assert direct_to(server, "nobody") is None
    assert eio_packet.Packet(eio_packet.MESSAGE, "x").encode() == "4x"


def test_socketio_sends_one_engineio_packet_through_its_server() -> None:
    parameters = list(inspect.signature(socketio.AsyncServer._send_eio_packet).parameters)
    assert parameters == ["self", "eio_sid", "eio_pkt"]
    assert inspect.iscoroutinefunction(socketio.AsyncServer._send_eio_packet)
    assert socketio.AsyncServer().packet_class is socketio.packet.Packet
    assert issubclass(InTurnDelivery, socketio.AsyncManager)


def test_the_redis_managers_listener_is_the_async_iterator_it_reads() -> None:
    assert inspect.isasyncgenfunction(socketio.AsyncRedisManager._redis_listen_with_retries)
    assert "self._redis_listen_with_retries()" in inspect.getsource(socketio.AsyncRedisManager._listen)
    manager = RedisInTurnDelivery("redis://127.0.0.1:6379/0")
    assert (manager.redis, manager.pubsub) == (None, None)
    manager._redis_connect()
    assert manager.redis is not None and manager.pubsub is not None


async def test_our_published_emit_is_the_message_the_library_publishes() -> None:
    class Recording(AsyncPubSubManager):  # type: ignore[misc]
        published: list[Any]

        async def _publish(self, data: Any) -> None:
            self.published.append(data)

    manager = Recording()
    manager.published = []
    await manager.emit("event", {"n": 1}, namespace="/chat", room="execution:e1")
    assert manager.published == [pubsub_emit(manager, "event", "/chat", "execution:e1", {"n": 1})]


async def test_every_way_into_and_out_of_a_room_goes_through_basic_enter_and_leave() -> None:
    calls: list[tuple[str, Any]] = []

    class Recording(socketio.AsyncManager):  # type: ignore[misc]
        def basic_enter_room(self, sid: str, namespace: str, room: Any, eio_sid: str | None = None) -> None:
            calls.append(("enter", room))
            super().basic_enter_room(sid, namespace, room, eio_sid=eio_sid)

        def basic_leave_room(self, sid: str, namespace: str, room: Any) -> None:
            calls.append(("leave", room))
            super().basic_leave_room(sid, namespace, room)

    class Ids:
        def generate_id(self) -> str:
            return "sid-1"

    class Server:
        eio = Ids()
        packet_class = socketio.packet.Packet

    manager = Recording()
    manager.set_server(Server())
    sid = await manager.connect("eio-1", "/chat")
    await manager.enter_room(sid, "/chat", "execution:a")
    await manager.enter_room(sid, "/chat", "execution:b")
    await manager.leave_room(sid, "/chat", "execution:a")
    await manager.close_room("execution:b", "/chat")
    await manager.enter_room(sid, "/chat", "execution:c")
    await manager.disconnect(sid, "/chat")
    rooms = [(call, room) for call, room in calls if room not in (None, sid)]
    assert rooms == [
        ("enter", "execution:a"),
        ("enter", "execution:b"),
        ("leave", "execution:a"),
        ("leave", "execution:b"),
        ("enter", "execution:c"),
        ("leave", "execution:c"),
    ]
    assert manager.rooms == {}  # {namespace: {room: participants}}, emptied as they leave


def test_the_pubsub_managers_reader_reads_listen_and_enter_room_is_what_we_override() -> None:
    assert "self._listen()" in inspect.getsource(AsyncPubSubManager._thread)
    assert inspect.isasyncgenfunction(socketio.AsyncRedisManager._listen)
    assert list(inspect.signature(AsyncPubSubManager.enter_room).parameters) == [
        "self", "sid", "namespace", "room", "eio_sid"
    ]
    assert list(inspect.signature(RedisInTurnDelivery.enter_room).parameters) == [
        "self", "sid", "namespace", "room", "eio_sid"
    ]
