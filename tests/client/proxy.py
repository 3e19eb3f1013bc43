"""A TCP proxy in front of the live server that misbehaves on purpose, like a flaky network or a strict gateway.

- `drop_creates`: that many create requests are forwarded, and once the server starts answering, both sides are
  cut: the server did the work, the client saw the connection break.
- `block_websockets`: connections that open with a Socket.IO handshake are closed at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from urllib.parse import urlsplit

CREATE = b"POST /api/eval/create-task-agent"
SOCKET_IO = b"GET /socket.io/"


@dataclass
class Proxy:
    upstream: str
    drop_creates: int = 0
    block_websockets: bool = False
    dropped: int = 0
    blocked: int = 0
    base: str = ""
    _loop: asyncio.AbstractEventLoop = field(default_factory=asyncio.new_event_loop)

    async def _pipe(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, cut: asyncio.Event | None
    ) -> None:
        with contextlib.suppress(ConnectionError, OSError):
            while chunk := await reader.read(65536):
                if cut is not None and cut.is_set():
                    return  # the answer to a doomed create: never forwarded
                writer.write(chunk)
                await writer.drain()

    async def _client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        host, port = urlsplit(self.upstream).hostname, urlsplit(self.upstream).port
        try:
            first = await reader.read(65536)
            if self.block_websockets and first.startswith(SOCKET_IO):
                self.blocked += 1
                writer.close()
                return
            up_reader, up_writer = await asyncio.open_connection(host, port)
        except (ConnectionError, OSError):
            writer.close()
            return
        cut = asyncio.Event()

        async def forward_requests() -> None:
            chunk = first
            with contextlib.suppress(ConnectionError, OSError):
                while chunk:
                    if chunk.startswith(CREATE) and self.dropped < self.drop_creates:
                        self.dropped += 1
                        cut.set()
                    up_writer.write(chunk)
                    await up_writer.drain()
                    chunk = await reader.read(65536)

        tasks = {asyncio.ensure_future(forward_requests()), asyncio.ensure_future(self._pipe(up_reader, writer, cut))}
        try:
            # Either side ending (or a cut) ends the connection on both sides.
            await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in tasks:
                task.cancel()
            up_writer.close()
            writer.close()

    @contextmanager
    def running(self) -> Iterator[Proxy]:
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        self.base = f"http://127.0.0.1:{sock.getsockname()[1]}"
        started = threading.Event()
        server: list[asyncio.Server] = []

        async def serve() -> None:
            server.append(await asyncio.start_server(self._client, sock=sock))
            started.set()

        thread = threading.Thread(target=self._loop.run_forever, name="test-proxy", daemon=True)
        thread.start()
        asyncio.run_coroutine_threadsafe(serve(), self._loop).result(timeout=10)
        started.wait(10)
        try:
            yield self
        finally:

            async def stop() -> None:
                server[0].close()
                for task in asyncio.all_tasks():
                    if task is not asyncio.current_task():
                        task.cancel()

            asyncio.run_coroutine_threadsafe(stop(), self._loop).result(timeout=10)
            self._loop.call_soon_threadsafe(self._loop.stop)
            thread.join(timeout=10)
            self._loop.close()
