"""Commands on one redis-py connection kept for them, written a loop turn's worth at a time, answered in order.

redis-py's client takes a connection from its pool per command (or per pipeline), with a task and two loop turns
before the write: on the API's rate limiter, which runs on every request, that was twice the CPU and latency of
the hand-written client it replaced (bench/README.md, issue 21). Here the commands callers queue during one turn of
the event loop are written together by one short task at the start of the next (redis-py's `Connection` packs and
writes them: one system call for all the requests that arrived together), and one task reads the answers, which
Redis gives in the order the commands came, and hands each to its caller.
"""

from __future__ import annotations

import asyncio
import collections
from collections.abc import Iterable
from typing import Any

import redis.asyncio as aioredis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import ResponseError

Packed = list[bytes]
"""A command as redis-py's `Connection.pack_command` packs it."""

# How long Redis may take to answer a publish, a subscription or a ping before its connection counts as lost.
REDIS_ANSWER_SECONDS = 5.0


class OrderedCalls:
    """`call(*args)`: one command, its answer (an error answer is raised, e.g. `NoScriptError`). Concurrent
    callers share the connection; a lost connection fails every command in flight, and the next call makes it
    again. No socket timeout (redis-py would write from a `wait_for` task of its own): callers that wait bound
    their own wait and `reset` on a timeout. For callers that do not wait (publishes), an `answer_timeout` counts
    the connection lost when an answer is owed longer than that (a timer on the reader's read)."""

    def __init__(self, url: str, connect_timeout: float, answer_timeout: float | None = None) -> None:
        self._answer_timeout = answer_timeout
        pool = aioredis.ConnectionPool.from_url(
            url, socket_timeout=None, socket_connect_timeout=connect_timeout, retry=Retry(NoBackoff(), 0)
        )
        self._connection = pool.make_connection()  # type: ignore[no-untyped-call]
        self._queued: list[tuple[Packed, asyncio.Future[Any]]] = []
        self._waiting: collections.deque[asyncio.Future[Any]] = collections.deque()
        self._writer: asyncio.Task[None] | None = None
        self._reader: asyncio.Task[None] | None = None
        # Each connection made counts one: a reader of a connection since lost leaves the new one alone.
        self._generation = 0
        self._closed = False

    @property
    def connected(self) -> bool:
        return bool(self._connection.is_connected)

    def pack(self, *args: Any) -> Packed:
        """`args` packed once, for a caller that sends the same command many times (`call_packed`)."""
        packed: Packed = self._connection.pack_command(*args)
        return packed

    async def call(self, *args: Any) -> Any:
        return await self.call_packed(self.pack(*args))

    async def send(self, commands: list[tuple[Any, ...]]) -> list[asyncio.Future[Any]]:
        """Write `commands` now, in one write and in this caller's step when the connection is up and nothing is
        queued before them; their answers to come."""
        connection = self._connection
        if self._writer is not None or not connection.is_connected or self._closed:
            return [self.call_packed(packed) for packed in (self.pack(*args) for args in commands)]
        loop = asyncio.get_running_loop()
        answers: list[asyncio.Future[Any]] = [loop.create_future() for _ in commands]
        await self._write_now(answers, connection.pack_commands(commands))
        return answers

    def call_packed(self, packed: Packed) -> asyncio.Future[Any]:
        """Queue one packed command; its answer to come. Cancelling the answer drops it when it arrives."""
        answer: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        if self._closed:
            answer.set_exception(RedisConnectionError("closed"))
            return answer
        self._queued.append((packed, answer))
        if self._writer is None:
            self._writer = asyncio.create_task(self._write(), name="redis-ordered-calls-write")
        return answer

    async def _write(self) -> None:
        # The one writer while it runs: commands queued meanwhile (during a connect) go out after these, in order.
        try:
            while self._queued:
                batch, self._queued = self._queued, []
                if self._closed:
                    _fail([answer for _, answer in batch], RedisConnectionError("closed"))
                    continue
                connection = self._connection
                if not connection.is_connected:
                    # Whatever the lost connection still owed will never come: failed, so that no answer on the
                    # new one is handed to a caller of the old (`_lost` may not have run yet: redis-py disconnects
                    # before it raises to the reader).
                    self._fail_waiting(RedisConnectionError("the connection to Redis was lost"))
                    self._generation += 1
                    try:
                        await connection.connect()
                    except BaseException as failed:
                        _fail([answer for _, answer in batch], failed)
                        if not isinstance(failed, Exception):
                            raise
                        continue
                try:
                    await self._write_now([answer for _, answer in batch], [c for packed, _ in batch for c in packed])
                except Exception:
                    continue  # the batch's answers hold the failure (`_lost`)
        finally:
            self._writer = None

    async def _write_now(self, answers: list[asyncio.Future[Any]], chunks: list[bytes]) -> None:
        # Queued before the write, and nothing awaited between the two: the queue's order is the wire's.
        self._waiting.extend(answers)
        try:
            await self._connection.send_packed_command(chunks, check_health=False)
        except BaseException as failed:
            await self._lost(self._generation, failed)
            raise
        if self._reader is None or self._reader.done():
            self._reader = asyncio.create_task(self._read(self._generation), name="redis-ordered-calls")

    async def _read(self, generation: int) -> None:
        connection = self._connection
        while self._waiting and generation == self._generation:
            try:
                if self._answer_timeout is None:
                    reply: Any = await connection.read_response()
                else:
                    async with asyncio.timeout(self._answer_timeout):
                        reply = await connection.read_response()
            except ResponseError as error:  # this command's error answer; the connection is fine
                reply = error
            except BaseException as failed:
                await self._lost(generation, failed)
                if not isinstance(failed, Exception):
                    raise
                return
            if generation != self._generation or not self._waiting:
                return
            answer = self._waiting.popleft()
            if answer.done():  # its caller stopped waiting (a timeout): the answer is dropped
                continue
            if isinstance(reply, ResponseError):
                answer.set_exception(reply)
            else:
                answer.set_result(reply)

    async def _lost(self, generation: int, failure: BaseException) -> None:
        if generation != self._generation:
            return
        self._generation += 1
        self._fail_waiting(failure)
        await self._connection.disconnect(nowait=True)

    def _fail_waiting(self, failure: BaseException) -> None:
        _fail(self._waiting, failure)
        self._waiting.clear()

    async def reset(self) -> None:
        """Drop the connection (a command went unanswered): the next call makes a new one."""
        await self._lost(self._generation, RedisConnectionError("no answer from Redis in time"))

    async def close(self) -> None:
        self._closed = True
        await self.reset()
        for task in (self._writer, self._reader):
            if task is not None:
                task.cancel()
        _fail([answer for _, answer in self._queued], RedisConnectionError("closed"))
        self._queued.clear()
        await self._connection.disconnect()


def _fail(answers: Iterable[asyncio.Future[Any]], failure: BaseException) -> None:
    error = failure if isinstance(failure, Exception) else RedisConnectionError("cancelled")
    for answer in answers:
        if not answer.done():
            answer.set_exception(error)
