"""A minimal pipelined Redis client for the one command every API request sends: the rate limiter's script.

redis-py's asyncio client costs about 0.12 ms of CPU per command on this path (pool checkout, command packing,
its RESP3 parser, retry wrapper; bench/README.md): the largest single cost of a cached status request. This
client keeps one connection, writes each command as soon as it is asked (all commands asked in one event-loop turn
leave in one write), and resolves the callers' futures in order as the replies arrive: Redis answers a connection's
commands in the order sent. Replies are integers, simple and bulk strings, errors and arrays of those (what EVALSHA
of our script, SCRIPT LOAD, AUTH and SELECT answer). A lost connection fails every command in flight and the next
command opens a new one. Errors are redis-py's exception types, so callers handle both clients alike.
"""

from __future__ import annotations

import asyncio
import collections
from typing import Any, cast
from urllib.parse import unquote, urlsplit

from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import NoScriptError, ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError

Reply = int | bytes | None | list[Any] | ResponseError


def pack(*parts: bytes | str | int) -> bytes:
    out = [b"*%d\r\n" % len(parts)]
    for part in parts:
        raw = part if isinstance(part, bytes) else str(part).encode()
        out.append(b"$%d\r\n%s\r\n" % (len(raw), raw))
    return b"".join(out)


class _Incomplete(Exception):
    pass


def _parse(buffer: bytes | bytearray, at: int) -> tuple[Reply, int]:
    end = buffer.find(b"\r\n", at)
    if end < 0:
        raise _Incomplete
    kind, line = buffer[at : at + 1], bytes(buffer[at + 1 : end])
    at = end + 2
    if kind == b":":
        return int(line), at
    if kind == b"+":
        return line, at
    if kind == b"-":
        text = line.decode(errors="replace")
        return (NoScriptError(text) if text.startswith("NOSCRIPT") else ResponseError(text)), at
    if kind == b"$":
        size = int(line)
        if size < 0:
            return None, at
        if len(buffer) < at + size + 2:
            raise _Incomplete
        return bytes(buffer[at : at + size]), at + size + 2
    if kind == b"*":
        count = int(line)
        items: list[Any] = []
        for _ in range(max(0, count)):
            item, at = _parse(buffer, at)
            items.append(item)
        return (None if count < 0 else items), at
    raise RedisConnectionError(f"unexpected reply type {kind!r} from Redis")


class _Protocol(asyncio.Protocol):
    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.waiting: collections.deque[asyncio.Future[Reply]] = collections.deque()
        self._buffer = bytearray()
        self._outgoing: list[bytes] = []
        self.lost = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports implement asyncio.Transport without subclassing it.
        self.transport = cast(asyncio.Transport, transport)

    def send(self, command: bytes, loop: asyncio.AbstractEventLoop) -> asyncio.Future[Reply]:
        if not self._outgoing:
            loop.call_soon(self._flush)  # one write for every command asked in this turn of the loop
        self._outgoing.append(command)
        future: asyncio.Future[Reply] = loop.create_future()
        self.waiting.append(future)
        return future

    def _flush(self) -> None:
        if self.transport is not None and not self.lost:
            self.transport.write(b"".join(self._outgoing))
        self._outgoing.clear()

    def data_received(self, data: bytes) -> None:
        self._buffer += data
        at = 0
        try:
            while at < len(self._buffer):
                reply, at = _parse(self._buffer, at)
                if self.waiting:
                    future = self.waiting.popleft()
                    if not future.done():
                        future.set_result(reply)
        except _Incomplete:
            pass
        except (ValueError, RedisConnectionError) as exc:
            self.fail(RedisConnectionError(f"unreadable reply from Redis: {exc}"))
            return
        del self._buffer[:at]

    def fail(self, exc: Exception) -> None:
        self.lost = True
        while self.waiting:
            future = self.waiting.popleft()
            if not future.done():
                future.set_exception(exc)
        if self.transport is not None:
            self.transport.close()

    def connection_lost(self, exc: Exception | None) -> None:
        self.fail(RedisConnectionError(f"connection to Redis lost ({exc or 'closed'})"))


class RespClient:
    def __init__(self, url: str, timeout: float) -> None:
        parts = urlsplit(url)
        if parts.scheme != "redis":
            raise ValueError(f"the fast Redis client speaks redis:// only, not {parts.scheme}://")
        self._host, self._port = parts.hostname or "127.0.0.1", parts.port or 6379
        self._db = int(parts.path.lstrip("/") or 0)
        self._auth = [unquote(p) for p in (parts.username, parts.password) if p]
        self._timeout = timeout
        self._protocol: _Protocol | None = None
        self._connecting: asyncio.Lock | None = None

    async def _connected(self) -> _Protocol:
        protocol = self._protocol
        if protocol is not None and not protocol.lost:
            return protocol
        self._connecting = self._connecting or asyncio.Lock()
        async with self._connecting:
            if self._protocol is None or self._protocol.lost:
                loop = asyncio.get_running_loop()
                try:
                    _, made = await asyncio.wait_for(
                        loop.create_connection(_Protocol, self._host, self._port), self._timeout
                    )
                except TimeoutError:
                    raise RedisTimeoutError("timed out connecting to Redis") from None
                # Set up before anyone else may send: these replies come first, in this order.
                setup = []
                if self._auth:
                    setup.append(made.send(pack(b"AUTH", *self._auth), loop))
                if self._db:
                    setup.append(made.send(pack(b"SELECT", self._db), loop))
                for reply in await asyncio.gather(*setup):
                    if isinstance(reply, ResponseError):
                        made.fail(RedisConnectionError(f"Redis refused the connection setup: {reply}"))
                        raise reply
                self._protocol = made
            return self._protocol

    async def call(self, *parts: bytes | str | int) -> Reply:
        """Send one command; its reply (an error reply is raised)."""
        protocol = await self._connected()
        loop = asyncio.get_running_loop()
        future = protocol.send(pack(*parts), loop)
        # A timer per command, not wait_for's task: cheap enough for every request.
        timer = loop.call_later(self._timeout, self._expire, protocol, future)
        try:
            reply = await future
        finally:
            timer.cancel()
        if isinstance(reply, ResponseError):
            raise reply
        return reply

    @staticmethod
    def _expire(protocol: _Protocol, future: asyncio.Future[Reply]) -> None:
        # Replies come in order: once one is late, the connection's later replies cannot be matched safely.
        if not future.done():
            protocol.fail(RedisTimeoutError("Redis did not answer in time"))

    async def close(self) -> None:
        if self._protocol is not None and self._protocol.transport is not None:
            self._protocol.transport.close()
        self._protocol = None
