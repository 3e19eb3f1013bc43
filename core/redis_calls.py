"""Commands on one redis-py connection kept for them, written as they are asked, answered in order.

redis-py's client takes a connection from its pool per command (or per pipeline), and a pipeline that gathers
the commands of one loop turn adds two turns and a task before the write: on the API's rate limiter, which runs
on every request, that was twice the CPU and latency of the hand-written client it replaced (bench/README.md,
issue 21). Here each command is packed and written by redis-py's `Connection` in its caller's own step, and one
task reads the answers, which Redis gives in the order the commands came, and hands each to its caller.
"""

from __future__ import annotations

import asyncio
import collections
from typing import Any

import redis.asyncio as aioredis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import ResponseError


class OrderedCalls:
    """`call(*args)`: one command, its answer (an error answer is raised, e.g. `NoScriptError`). Concurrent
    callers share the connection; a lost connection fails every command in flight, and the next call makes it
    again. No socket timeout (redis-py would write from a `wait_for` task of its own): callers bound their wait
    and `reset` on a timeout. An answer owed for longer than `answer_timeout` seconds counts the connection lost
    (a timer on the reader's read, not a task per write)."""

    def __init__(self, url: str, connect_timeout: float, answer_timeout: float) -> None:
        self._answer_timeout = answer_timeout
        pool = aioredis.ConnectionPool.from_url(
            url, socket_timeout=None, socket_connect_timeout=connect_timeout, retry=Retry(NoBackoff(), 0)
        )
        self._connection = pool.make_connection()  # type: ignore[no-untyped-call]
        self._waiting: collections.deque[asyncio.Future[Any]] = collections.deque()
        self._reader: asyncio.Task[None] | None = None
        self._connecting = asyncio.Lock()
        # Each connection made counts one: a reader of a connection since lost leaves the new one alone.
        self._generation = 0

    @property
    def connected(self) -> bool:
        return bool(self._connection.is_connected)

    async def call(self, *args: Any) -> Any:
        (answer,) = await self.send([args])
        return await answer

    async def send(self, commands: list[tuple[Any, ...]]) -> list[asyncio.Future[Any]]:
        """Write `commands` in one write (connecting first if need be) and return their answers to come."""
        connection = self._connection
        if not connection.is_connected:
            async with self._connecting:
                if not connection.is_connected:
                    self._fail_waiting(RedisConnectionError("the connection to Redis was lost"))
                    self._generation += 1
                    await connection.connect()
        loop = asyncio.get_running_loop()
        answers: list[asyncio.Future[Any]] = [loop.create_future() for _ in commands]
        # Queued before the write, and nothing awaited between the two: the queue's order is the wire's.
        self._waiting.extend(answers)
        try:
            await connection.send_packed_command(connection.pack_commands(commands), check_health=False)
        except BaseException as failed:
            await self._lost(self._generation, failed)
            raise
        if self._reader is None or self._reader.done():
            self._reader = asyncio.create_task(self._read(self._generation), name="redis-ordered-calls")
        return answers

    async def _read(self, generation: int) -> None:
        connection = self._connection
        while self._waiting and generation == self._generation:
            try:
                async with asyncio.timeout(self._answer_timeout):
                    reply: Any = await connection.read_response()
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

    def _fail_waiting(self, failure: BaseException) -> None:
        error = failure if isinstance(failure, Exception) else RedisConnectionError("cancelled")
        while self._waiting:
            answer = self._waiting.popleft()
            if not answer.done():
                answer.set_exception(error)

    async def _lost(self, generation: int, failure: BaseException) -> None:
        if generation != self._generation:
            return
        self._generation += 1
        self._fail_waiting(failure)
        await self._connection.disconnect(nowait=True)

    async def reset(self) -> None:
        """Drop the connection (a command went unanswered): the next call makes a new one."""
        await self._lost(self._generation, RedisConnectionError("no answer from Redis in time"))

    async def close(self) -> None:
        await self.reset()
        if self._reader is not None:
            self._reader.cancel()
        await self._connection.disconnect()
