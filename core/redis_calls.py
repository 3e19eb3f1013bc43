"""Commands on one redis-py connection kept for them, written a loop turn's worth at a time, answered in order.

redis-py's client takes a connection from its pool per command (or per pipeline), with a task and two loop turns
before the write: on the API's rate limiter, which runs on every request, that was twice the CPU and latency of
the hand-written client it replaced (bench/README.md, issue 21). Here the commands callers queue during one turn of
the event loop are written together by one short task at the start of the next (redis-py's `Connection` packs and
writes them: one system call for all the requests that arrived together), and one task reads the answers, which
Redis gives in the order the commands came, and hands each to its caller.

A connection that only publishes (`quiet`) asks Redis to answer none of its commands (`CLIENT REPLY OFF`): nobody
waits for a publish's answer, yet reading each one woke the publishing process and cost it, and Redis, a read and
a write per commit (bench/README.md, issue 25). Now and then, and whenever asked (`handled`), a probe is sent that
Redis does answer; as it answers in order, that answer says every command before it was handled, and one not
answered in time says the connection is lost, as an answer owed does on any other connection.
"""

from __future__ import annotations

import asyncio
import collections
import logging
from collections.abc import Iterable, Sequence
from typing import Any

import redis.asyncio as aioredis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import ResponseError

log = logging.getLogger(__name__)

Packed = list[bytes]
"""A command as redis-py's `Connection.pack_command` packs it."""

# Told once on each connection of a quiet `OrderedCalls`: Redis answers none of its commands from then on.
_REPLIES_OFF = ("CLIENT", "REPLY", "OFF")
# Answered once, by ON's OK, on a connection that answers nothing otherwise; which is then as quiet as before.
_PROBE_COMMANDS = (("CLIENT", "REPLY", "ON"), _REPLIES_OFF)
# How often a quiet connection that publishes asks for an answer (a probe), to find out that it was lost.
PROBE_SECONDS = 1.0


class _Probe:
    """Queued in place of a command: at the write, the probe where the connection answers nothing, a PING where it
    answers everything; either way one answer."""


_PROBE = _Probe()

# How long Redis may take to answer a publish, a subscription or a ping before its connection counts as lost.
REDIS_ANSWER_SECONDS = 5.0


class OrderedCalls:
    """`call(*args)`: one command, its answer (an error answer is raised, e.g. `NoScriptError`). Concurrent
    callers share the connection; a lost connection fails every command in flight, and the next call makes it
    again. No socket timeout (redis-py would write from a `wait_for` task of its own): callers that wait bound
    their own wait and `reset` on a timeout. For callers that do not wait (publishes), an `answer_timeout` counts
    the connection lost when an answer is owed longer than that (a timer on the reader's read)."""

    def __init__(
        self, url: str, connect_timeout: float, answer_timeout: float | None = None, *, quiet: bool = False
    ) -> None:
        """`quiet`: the connection only carries commands whose answers nobody reads (`send_quiet`), and asks Redis
        not to send them. A server that refuses (`CLIENT` not allowed, or not known) answers as usual, and the
        answers are read and dropped."""
        self._answer_timeout = answer_timeout
        self._connect_timeout = connect_timeout
        pool = aioredis.ConnectionPool.from_url(
            url, socket_timeout=None, socket_connect_timeout=connect_timeout, retry=Retry(NoBackoff(), 0)
        )
        self._connection = pool.make_connection()  # type: ignore[no-untyped-call]
        # Each command with the future its answer goes to: None for one whose answer nobody waits for (`send_quiet`),
        # _PROBE in place of a probe's commands.
        self._queued: list[tuple[Packed | _Probe, asyncio.Future[Any] | None]] = []
        # The answers owed, in order: None for one to read and drop.
        self._waiting: collections.deque[asyncio.Future[Any] | None] = collections.deque()
        self._quiet = quiet
        # Whether Redis refused `_REPLIES_OFF` once: every later connection is answered, and reads its answers.
        self._refused = False
        # Whether the connection now made answers nothing (told `_REPLIES_OFF`, and it took).
        self._answers_nothing = False
        self._probing: asyncio.Future[Any] | None = None
        self._probed_at = 0.0
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
        if self._quiet:
            raise ValueError("a quiet connection's commands are answered by nobody: send_quiet")
        if self._writer is not None or not connection.is_connected or self._closed:
            return [self.call_packed(packed) for packed in (self.pack(*args) for args in commands)]
        loop = asyncio.get_running_loop()
        answers: list[asyncio.Future[Any]] = [loop.create_future() for _ in commands]
        await self._write_now(answers, connection.pack_commands(commands))
        return answers

    async def send_quiet(self, commands: list[tuple[Any, ...]]) -> asyncio.Future[Any] | None:
        """Write `commands`, whose answers nobody waits for, as `send` does: now when it can, else after what is
        queued. On a quiet connection, a probe goes with them when one is due: its answer to come (it fails if
        the connection was lost, or Redis did not answer in time), or None."""
        connection = self._connection
        if self._writer is not None or not connection.is_connected or self._closed:
            for args in commands:
                self._queue(self.pack(*args), None)
            return None
        probe = self._probe_due()
        # Where Redis answers anyway (it refused to stop), the answers are read and dropped.
        waiting: list[asyncio.Future[Any] | None] = [] if self._answers_nothing else [None] * len(commands)
        if probe is not None:
            waiting.append(probe)
        await self._write_now(waiting, [*connection.pack_commands(commands), *self._pack_probe(probe)])
        return probe

    def handled(self) -> asyncio.Future[Any]:
        """An answer that comes once Redis has handled every command written or queued before it (for a closing
        publisher: everything it published has left)."""
        answer: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._queue(_PROBE, answer)
        return answer

    def _probe_due(self) -> asyncio.Future[Any] | None:
        """A probe's answer when one should go with the next write of a quiet connection; None otherwise."""
        if not self._answers_nothing or self._probing is not None:
            return None
        loop = asyncio.get_running_loop()
        if loop.time() - self._probed_at < PROBE_SECONDS:
            return None
        self._probed_at = loop.time()
        probe: asyncio.Future[Any] = loop.create_future()
        self._probing = probe
        probe.add_done_callback(self._probe_answered)
        return probe

    def _probe_answered(self, probe: asyncio.Future[Any]) -> None:
        if self._probing is probe:
            self._probing = None

    def _pack_probe(self, probe: asyncio.Future[Any] | None) -> list[bytes]:
        if probe is None:
            return []
        if self._answers_nothing:
            chunks: list[bytes] = self._connection.pack_commands(list(_PROBE_COMMANDS))
            return chunks
        return self.pack("PING")

    def call_packed(self, packed: Packed) -> asyncio.Future[Any]:
        """Queue one packed command; its answer to come. Cancelling the answer drops it when it arrives."""
        if self._quiet:
            raise ValueError("a quiet connection's commands are answered by nobody: send_quiet")
        answer: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._queue(packed, answer)
        return answer

    def _queue(self, packed: Packed | _Probe, answer: asyncio.Future[Any] | None) -> None:
        if self._closed:
            if answer is not None:
                answer.set_exception(RedisConnectionError("closed"))
            return
        self._queued.append((packed, answer))
        if self._writer is None:
            self._writer = asyncio.create_task(self._write(), name="redis-ordered-calls-write")

    async def _write(self) -> None:
        # The one writer while it runs: commands queued meanwhile (during a connect) go out after these, in order.
        try:
            while self._queued:
                batch, self._queued = self._queued, []
                if self._closed:
                    _fail(_answers(batch), RedisConnectionError("closed"))
                    continue
                connection = self._connection
                if not connection.is_connected:
                    # Whatever the lost connection still owed will never come: failed, so that no answer on the
                    # new one is handed to a caller of the old (`_lost` may not have run yet: redis-py disconnects
                    # before it raises to the reader).
                    self._fail_waiting(RedisConnectionError("the connection to Redis was lost"))
                    self._generation += 1
                    try:
                        await self._connect()
                    except BaseException as failed:
                        _fail(_answers(batch), failed)
                        if not isinstance(failed, Exception):
                            raise
                        continue
                waiting: list[asyncio.Future[Any] | None] = []
                chunks: list[bytes] = []
                for packed, answer in batch:
                    if isinstance(packed, _Probe):
                        chunks += self._pack_probe(answer)
                        waiting.append(answer)
                    else:
                        chunks += packed
                        if answer is not None or not self._answers_nothing:
                            waiting.append(answer)
                try:
                    await self._write_now(waiting, chunks)
                except Exception:
                    continue  # the batch's answers hold the failure (`_lost`)
        finally:
            self._writer = None

    async def _connect(self) -> None:
        """Connect; a quiet connection is then told to answer nothing, and waits to hear that it took (the probe's
        answer) before anything else is written on it: it must know which answers to read."""
        self._answers_nothing = False
        connection = self._connection
        await connection.connect()
        if not self._quiet or self._refused:
            return
        told = connection.pack_commands([_REPLIES_OFF, *_PROBE_COMMANDS])
        await connection.send_packed_command(told, check_health=False)
        try:
            async with asyncio.timeout(self._connect_timeout):
                answer = await connection.read_response()
        except ResponseError as refused:
            # Three errors owed (OFF, ON, OFF); on a connection made anew, every command is answered, and read.
            log.info("Redis refused CLIENT REPLY (%s): its answers to publishes are read and dropped", refused)
            self._refused = True
            await connection.disconnect()
            await connection.connect()
            return
        except BaseException:
            await connection.disconnect(nowait=True)
            raise
        self._answers_nothing = answer in (b"OK", "OK", True)
        if not self._answers_nothing:
            await connection.disconnect(nowait=True)
            raise RedisConnectionError(f"unexpected answer to CLIENT REPLY ON: {answer!r}")

    async def _write_now(self, answers: Sequence[asyncio.Future[Any] | None], chunks: list[bytes]) -> None:
        # Queued before the write, and nothing awaited between the two: the queue's order is the wire's.
        self._waiting.extend(answers)
        try:
            await self._connection.send_packed_command(chunks, check_health=False)
        except BaseException as failed:
            await self._lost(self._generation, failed)
            raise
        if self._waiting and (self._reader is None or self._reader.done()):
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
            if answer is None or answer.done():  # nobody waits for it, or its caller stopped waiting (a timeout)
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
        _fail(_answers(self._queued), RedisConnectionError("closed"))
        self._queued.clear()
        await self._connection.disconnect()


def _answers(batch: Iterable[tuple[Any, asyncio.Future[Any] | None]]) -> list[asyncio.Future[Any] | None]:
    return [answer for _, answer in batch]


def _fail(answers: Iterable[asyncio.Future[Any] | None], failure: BaseException) -> None:
    error = failure if isinstance(failure, Exception) else RedisConnectionError("cancelled")
    for answer in answers:
        if answer is not None and not answer.done():
            answer.set_exception(error)
