"""Load generators: requests sent on a schedule, never waiting for answers before the next (open loop)."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable, Coroutine
from typing import Any

from bench.common import Stack


async def open_loop(count: int, rate: float, send: Callable[[int], Coroutine[Any, Any, None]]) -> None:
    """Start send(i) at start + i/rate whatever the earlier ones are doing (open loop), then wait for all."""
    loop = asyncio.get_running_loop()
    start = loop.time()
    tasks: list[asyncio.Task[None]] = []
    for i in range(count):
        delay = start + i / rate - loop.time()
        if delay > 0:
            await asyncio.sleep(delay)
        tasks.append(asyncio.create_task(send(i)))
    await asyncio.gather(*tasks)


class WirePoster:
    """JSON POSTs over kept-alive HTTP/1.1 connections, each stamped the moment its bytes are handed to the socket.

    For latencies measured from a request's arrival: an HTTP client library spends a few hundred microseconds
    of this process's time on a request before it writes it (measured here: aiohttp, about 0.5 ms on this
    machine), which is neither the network nor the service. The request is built before the stamp; from the
    stamp it is one write on loopback. Connections are opened before the first send and reused; one more is
    opened whenever all are busy (an open loop must not wait for an answer) and instead of one the server closed."""

    def __init__(self, st: Stack, path: str, connections: int = 4, port: int | None = None) -> None:
        self._host, self._port = "127.0.0.1", port or st.port
        self._head = (
            f"POST {path} HTTP/1.1\r\nHost: {self._host}:{self._port}\r\nAuthorization: Bearer {st.key}\r\n"
            "Content-Type: application/json\r\n"
        )
        self._idle: list[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = []
        self._opening = connections
        self._all: list[asyncio.StreamWriter] = []

    async def __aenter__(self) -> WirePoster:
        for _ in range(self._opening):
            self._idle.append(await self._connect())
        return self

    async def __aexit__(self, *_: object) -> None:
        for writer in self._all:
            writer.close()

    async def _connect(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        reader, writer = await asyncio.open_connection(self._host, self._port)
        self._all.append(writer)
        return reader, writer

    async def post(self, body: dict[str, Any]) -> tuple[float, int, dict[str, Any]]:
        """(the moment the request was written, in time.time(); the status; the JSON answer)"""
        payload = json.dumps(body).encode()
        request = f"{self._head}Content-Length: {len(payload)}\r\n\r\n".encode() + payload
        while self._idle:
            reader, writer = self._idle.pop()
            if not (reader.at_eof() or writer.is_closing()):
                break  # else the server closed it while idle (its keep-alive timeout)
        else:
            reader, writer = await self._connect()
        sent = time.time()
        writer.write(request)
        status_line = await reader.readuntil(b"\r\n")
        head = await reader.readuntil(b"\r\n\r\n")
        length = 0
        for line in head.decode("latin-1").split("\r\n"):
            name, _, value = line.partition(":")
            if name.strip().lower() == "content-length":
                length = int(value)
        answer = json.loads(await reader.readexactly(length)) if length else {}
        self._idle.append((reader, writer))
        return sent, int(status_line.split()[1]), answer
