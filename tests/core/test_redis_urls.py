"""The Redis URLs the bus reads (through redis-py): a unix socket with a database number, and `?client_name=`."""

from __future__ import annotations

import asyncio
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis.asyncio as aioredis

from core.redis_bus import RedisBus
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


async def _answering(socket: Path) -> None:
    async def up() -> bool | None:
        client = aioredis.Redis(unix_socket_path=str(socket))
        try:
            return bool(await client.ping())
        except (OSError, aioredis.ConnectionError):
            return None
        finally:
            await client.aclose()

    await until(up, timeout=10)


async def test_the_bus_over_a_unix_socket_uses_its_database(unix_redis: Path) -> None:
    await _answering(unix_redis)
    url = f"unix://{unix_redis}?db=3&client_name=vouch-test-unix"
    admin = aioredis.Redis(unix_socket_path=str(unix_redis))
    sender, receiver = RedisBus(url), RedisBus(url)
    heard: list[dict[str, Any]] = []
    try:
        listening = receiver.listen(("vouch-test:",), lambda _c, message: heard.append(message), lambda: None)
        await until(lambda: asyncio.sleep(0, True if listening.healthy else None))
        await sender.publish("vouch-test:unix", {"over": "a unix socket"})
        await until(lambda: asyncio.sleep(0, True if heard else None))
        # While connected: each of the bus's connections is on the database its URL names.
        databases = {entry["db"] for entry in await connections(admin, "vouch-test-unix")}
    finally:
        await sender.close()
        await receiver.close()
        await admin.aclose()
    assert heard == [{"over": "a unix socket"}]
    assert databases == {"3"}  # SELECT 3 was sent, not ignored


async def test_a_client_name_in_the_url_names_every_bus_connection() -> None:
    """`?client_name=` is redis-py's URL parameter: an operator (or a test) finds a process's connections in
    CLIENT LIST by it, the publisher's and each listener's."""
    url, name = named_url("urls")
    bus = RedisBus(url)
    admin = aioredis.Redis.from_url(REDIS_URL)
    try:
        listening = bus.listen(("vouch-test:",), lambda _c, _m: None, lambda: None)
        await until(lambda: asyncio.sleep(0, True if listening.healthy else None))
        await bus.publish("vouch-test:named", {"n": 1})

        async def both() -> bool | None:
            return True if len(await connections(admin, name)) == 2 else None

        await until(both)
    finally:
        await bus.close()
        await admin.aclose()
