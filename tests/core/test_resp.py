"""core.resp.RespClient against a real Redis server: over TCP, and over a unix socket with a database number."""

from __future__ import annotations

import asyncio
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis.asyncio as aioredis

from core.redis_bus import RedisBus
from core.resp import RespClient
from tests.support.redis_clients import connections, named_url
from tests.support.waiting import until

REDIS_URL = "redis://127.0.0.1:6379/0"


@pytest.fixture
def unix_redis(tmp_path: Path) -> Iterator[Path]:
    """A redis-server of its own, listening only on a unix socket."""
    socket = tmp_path / "redis.sock"
    server = subprocess.Popen(
        ["redis-server", "--port", "0", "--unixsocket", str(socket), "--save", "", "--appendonly", "no"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        yield socket
    finally:
        server.terminate()
        server.wait(timeout=10)


async def _answering(socket: Path) -> RespClient:
    async def up() -> RespClient | None:
        client = RespClient(f"unix://{socket}?db=3", 5.0)
        try:
            await client.call(b"PING")
        except OSError:
            return None
        return client

    return await until(up, timeout=10)


async def test_commands_and_pushed_messages_over_tcp() -> None:
    pushed: list[list[Any]] = []
    subscriber = RespClient(REDIS_URL, 5.0, on_push=pushed.append)
    publisher = RespClient(REDIS_URL, 5.0)
    try:
        assert await subscriber.call(b"PSUBSCRIBE", b"vouch-test:resp:*") == [b"psubscribe", b"vouch-test:resp:*", 1]
        assert await publisher.call(b"PUBLISH", b"vouch-test:resp:a", b"hello") == 1
        assert await subscriber.call(b"PING") == [b"pong", b""]  # answered after the message it follows
        assert pushed == [[b"pmessage", b"vouch-test:resp:*", b"vouch-test:resp:a", b"hello"]]
    finally:
        await subscriber.close()
        await publisher.close()


async def test_a_unix_socket_url_reaches_its_database(unix_redis: Path) -> None:
    client = await _answering(unix_redis)
    try:
        await client.call(b"SET", b"where", b"db 3")
        assert await client.call(b"GET", b"where") == b"db 3"
    finally:
        await client.close()
    other = aioredis.Redis(unix_socket_path=str(unix_redis), db=3)
    plain = aioredis.Redis(unix_socket_path=str(unix_redis), db=0)
    try:
        assert await other.get("where") == b"db 3"  # SELECT 3 was sent, not ignored
        assert await plain.get("where") is None
    finally:
        await other.aclose()
        await plain.aclose()


async def test_the_bus_over_a_unix_socket(unix_redis: Path) -> None:
    await (await _answering(unix_redis)).close()
    url = f"unix://{unix_redis}?db=1"
    sender, receiver = RedisBus(url), RedisBus(url)
    heard: list[dict[str, Any]] = []
    try:
        listening = receiver.listen(("vouch-test:",), lambda _c, message: heard.append(message), lambda: None)
        await until(lambda: asyncio.sleep(0, True if listening.healthy else None))
        await sender.publish("vouch-test:unix", {"over": "a unix socket"})
        await until(lambda: asyncio.sleep(0, True if heard else None))
        assert heard == [{"over": "a unix socket"}]
    finally:
        await sender.close()
        await receiver.close()


async def test_a_client_name_in_the_url_names_the_connection_as_redis_py_does() -> None:
    """`?client_name=` is redis-py's URL parameter: both clients name their connections from it, so an operator
    (or a test) finds a process's connections in CLIENT LIST."""
    url, name = named_url("resp")
    ours = RespClient(url, 5.0)
    theirs = aioredis.Redis.from_url(url)
    admin = aioredis.Redis.from_url(REDIS_URL)
    try:
        await ours.call(b"PING")
        await theirs.ping()
        assert len(await connections(admin, name)) == 2
        assert await ours.call(b"CLIENT", b"GETNAME") == name.encode()
    finally:
        await ours.close()
        await theirs.aclose()
        await admin.aclose()
