"""A minimal pipelined Redis client: the rate limiter's script on every API request, and the bus's publishes and
pattern subscriptions (core/redis_bus.py).

redis-py's asyncio client costs about 0.12 ms of CPU per command on this path (pool checkout, command packing,
its RESP3 parser, retry wrapper; bench/README.md): the largest single cost of a cached status request. This
client keeps one connection, writes each command as soon as it is asked (all commands asked in one event-loop turn
leave in one write), and resolves the callers' futures in order as the replies arrive: Redis answers a connection's
commands in the order sent. Replies are integers, simple and bulk strings, errors and arrays of those (what EVALSHA
of our script, SCRIPT LOAD, AUTH, SELECT, CLIENT SETNAME, PUBLISH, PSUBSCRIBE and PING answer). On a subscribed
connection the messages Redis pushes (`pmessage`) go to `on_push` as they are read, not to a caller. A lost
connection fails every command in flight and the next command opens a new one. Errors are redis-py's exception
types, so callers handle both clients alike.
"""

from __future__ import annotations

import asyncio
import collections
import ssl
from collections.abc import Callable
from typing import Any, cast
from urllib.parse import parse_qs, unquote, urlsplit

from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import NoScriptError, ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError

Reply = int | bytes | None | list[Any] | ResponseError
# Called with a pushed message's parts, e.g. [b"pmessage", pattern, channel, data].
PushHandler = Callable[[list[Any]], None]
_PUSHED = (b"pmessage", b"message")


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
    def __init__(self, on_push: PushHandler | None) -> None:
        self.transport: asyncio.Transport | None = None
        self.waiting: collections.deque[asyncio.Future[Reply]] = collections.deque()
        self._buffer = bytearray()
        self._outgoing: list[bytes] = []
        self._on_push = on_push
        self.lost = False
        self.closed = asyncio.get_running_loop().create_future()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports implement asyncio.Transport without subclassing it.
        self.transport = cast(asyncio.Transport, transport)

    def send(self, command: bytes, loop: asyncio.AbstractEventLoop) -> asyncio.Future[Reply]:
        if not self._outgoing:
            loop.call_soon(self.flush)  # one write for every command asked in this turn of the loop
        self._outgoing.append(command)
        future: asyncio.Future[Reply] = loop.create_future()
        self.waiting.append(future)
        return future

    def flush(self) -> None:
        if not self._outgoing:  # already written by an early `flush`
            return
        if self.transport is not None and not self.lost:
            self.transport.write(b"".join(self._outgoing))
        self._outgoing.clear()

    def data_received(self, data: bytes) -> None:
        self._buffer += data
        at = 0
        try:
            while at < len(self._buffer):
                reply, at = _parse(self._buffer, at)
                if self._on_push is not None and isinstance(reply, list) and reply and reply[0] in _PUSHED:
                    self._on_push(reply)
                elif self.waiting:
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
        if not self.closed.done():
            self.closed.set_result(None)

    def connection_lost(self, exc: Exception | None) -> None:
        self.fail(RedisConnectionError(f"connection to Redis lost ({exc or 'closed'})"))


class RespClient:
    def __init__(self, url: str, timeout: float, *, on_push: PushHandler | None = None) -> None:
        """`url` as redis-py reads it: redis://[user:password@]host[:port][/db], rediss://… (TLS), or
        unix://[user:password@]/path/to/socket[?db=N]; `?client_name=NAME` names the connection."""
        parts = urlsplit(url)
        if parts.scheme not in ("redis", "rediss", "unix"):
            raise ValueError(f"a Redis URL is redis://, rediss:// or unix://, not {parts.scheme}://")
        self._unix_path = parts.path if parts.scheme == "unix" else None
        self._host, self._port = parts.hostname or "127.0.0.1", parts.port or 6379
        self._tls = ssl.create_default_context() if parts.scheme == "rediss" else None
        query = parse_qs(parts.query)
        database = query.get("db", ["0"])[0] if self._unix_path else parts.path.lstrip("/")
        self._db = int(database or 0)
        # redis-py's URL parameter: every connection of ours then shows in CLIENT LIST under that name.
        self._name = query.get("client_name", [""])[0]
        self._auth = [unquote(p) for p in (parts.username, parts.password) if p]
        self._timeout = timeout
        self._on_push = on_push
        self._protocol: _Protocol | None = None
        self._connecting: asyncio.Lock | None = None

    async def _open(self) -> _Protocol:
        loop = asyncio.get_running_loop()
        if self._unix_path is not None:
            _, made = await loop.create_unix_connection(lambda: _Protocol(self._on_push), self._unix_path)
        else:
            _, made = await loop.create_connection(
                lambda: _Protocol(self._on_push), self._host, self._port, ssl=self._tls
            )
        return made

    async def _connected(self) -> _Protocol:
        protocol = self._protocol
        if protocol is not None and not protocol.lost:
            return protocol
        self._connecting = self._connecting or asyncio.Lock()
        async with self._connecting:
            if self._protocol is None or self._protocol.lost:
                loop = asyncio.get_running_loop()
                try:
                    made = await asyncio.wait_for(self._open(), self._timeout)
                except TimeoutError:
                    raise RedisTimeoutError("timed out connecting to Redis") from None
                # Set up before anyone else may send: these replies come first, in this order.
                setup = []
                if self._auth:
                    setup.append(made.send(pack(b"AUTH", *self._auth), loop))
                if self._db:
                    setup.append(made.send(pack(b"SELECT", self._db), loop))
                if self._name:
                    setup.append(made.send(pack(b"CLIENT", b"SETNAME", self._name), loop))
                for reply in await asyncio.gather(*setup):
                    if isinstance(reply, ResponseError):
                        made.fail(RedisConnectionError(f"Redis refused the connection setup: {reply}"))
                        raise reply
                self._protocol = made
            return self._protocol

    @property
    def connected(self) -> bool:
        return self._protocol is not None and not self._protocol.lost

    async def connect(self) -> asyncio.Future[None]:
        """Connect (if not yet connected); a future that is done once this connection is lost or closed."""
        return (await self._connected()).closed

    async def call(self, *parts: bytes | str | int) -> Reply:
        """Send one command; its reply (an error reply is raised)."""
        reply = await self._send_on(await self._connected(), *parts)
        if isinstance(reply, ResponseError):
            raise reply
        return reply

    def send_now(self, *parts: bytes | str | int) -> asyncio.Future[Reply]:
        """Send one command on the connection there is (check `connected` first), without waiting: it leaves with
        whatever else is asked in this turn of the event loop; the future holds its reply (an error reply as the
        result) or the connection's failure."""
        if self._protocol is None or self._protocol.lost:
            raise RedisConnectionError("not connected to Redis")
        return self._send_on(self._protocol, *parts)

    def flush(self) -> None:
        """Write now what was asked so far in this turn of the loop, rather than at the turn's end: for a caller
        that knows its batch is complete and whose turn has more work in it (a request's answer, its logging)."""
        if self._protocol is not None:
            self._protocol.flush()

    def _send_on(self, protocol: _Protocol, *parts: bytes | str | int) -> asyncio.Future[Reply]:
        loop = asyncio.get_running_loop()
        future = protocol.send(pack(*parts), loop)
        # A timer per command, not wait_for's task: cheap enough for every request.
        timer = loop.call_later(self._timeout, self._expire, protocol, future)
        future.add_done_callback(lambda _: timer.cancel())
        return future

    @staticmethod
    def _expire(protocol: _Protocol, future: asyncio.Future[Reply]) -> None:
        # Replies come in order: once one is late, the connection's later replies cannot be matched safely.
        if not future.done():
            protocol.fail(RedisTimeoutError("Redis did not answer in time"))

    async def close(self) -> None:
        if self._protocol is not None and self._protocol.transport is not None:
            self._protocol.transport.close()
        self._protocol = None
