"""Sessions and the one commit point that publishes after commit (the engine: core/engines.py)."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar, runtime_checkable

from sqlalchemy.ext.asyncio import AsyncConnection, AsyncSession, async_sessionmaker

from core import engines
from core.backends import BACKEND, backend_for, backend_of
from core.backends.base import Backend
from core.bus import Bus, SentInOrder
from core.coroutines import run_to_completion
from core.sql import one_of as one_of

log = logging.getLogger(__name__)

_PENDING = "vouch_publish_after_commit"
_EVENTS = "vouch_events_after_commit"
_MORE_TO_WRITE = "vouch_more_to_write"
# In every session's info when this process records spans for export (core/trace_outbox.py).
TRACES = "vouch_traces"

# Receives each committed event's wire message (core.event_messages.event_message). Registered at start-up by
# the process's composition root (the web app emits into Socket.IO rooms, a worker into Redis), so core
# needs to know nothing of who listens.
EventSink = Callable[[dict[str, Any]], Awaitable[None]]


@runtime_checkable
class LiveSink(Protocol):
    """An event sink that also carries what is never stored: the model's text while it is being written
    (`Database.send_live`). The chat's sinks are; a sink that is not simply never hears of it."""

    async def live(self, message: dict[str, Any]) -> None: ...


# How long the end of a `keeping_alone` block waits for the news its statements queued to leave.
_NEWS_SECONDS = 5.0
# Within a block, the least time between two batches of its news: a run of quick steps (a step every
# millisecond on PostgreSQL) then writes to the bus once every few steps, not once a step, whose write and the
# bus's wake-up cost the step as much as a tenth of its time on two cores (issue 25, bench/README.md). A watcher
# sees a step at most this much later; the first batch, and what waits when the block ends, leave at once.
NEWS_SPACING_SECONDS = 0.005

# What one commit sends out afterwards: its events' wire messages, and its bus messages by channel.
_News = tuple[list[dict[str, Any]], list[tuple[str, dict[str, Any]]]]


def publish_after_commit(session: AsyncSession | Alone, channel: str, message: dict[str, Any]) -> None:
    """Queue a bus message that goes out only if, and after, the session commits (or its statement, alone)."""
    session.info.setdefault(_PENDING, []).append((channel, message))


def more_to_write(session: AsyncSession) -> None:
    """Say that `session`'s transaction will hold more than the next statement a callee writes, so that the
    callee does not let that statement commit by itself (`commits_alone`)."""
    session.info[_MORE_TO_WRITE] = True


async def commits_alone(session: AsyncSession) -> bool:
    """When nothing has run in `session` yet and no caller said `more_to_write`, make its next statement commit
    by itself where the backend can (PostgreSQL: without the round trips of BEGIN and COMMIT, on a path of two or
    three statements a third of its time: bench/README.md). Says whether it did: the caller must then write
    nothing more in this session. The session's commit still publishes what was queued to go out after it."""
    if session.in_transaction() or session.info.get(_MORE_TO_WRITE):
        return False
    return await backend_of(session).commit_alone(session)


async def committing_alone(session: AsyncSession) -> bool:
    """Whether `session`'s statements commit by themselves now (`commits_alone` made them so)."""
    if not session.in_transaction():
        return False
    connection = (await session.connection()).sync_connection
    return connection is not None and connection.get_execution_options().get("isolation_level") == "AUTOCOMMIT"


async def in_a_transaction_again(session: AsyncSession) -> None:
    """After statements that committed by themselves (`commits_alone`), `session`'s next one begins a transaction
    as usual: the connection goes back to the pool, which restores its isolation level. What was queued to go out
    after the commit stays queued for the session's commit."""
    await session.commit()


def event_after_commit(session: AsyncSession | Alone, message: dict[str, Any]) -> None:
    """Queue an event's wire message for the event sinks, sent only if, and after, the session commits (or its
    statement, alone)."""
    session.info.setdefault(_EVENTS, []).append(message)


@dataclass
class Alone:
    """A connection of `Database.alone`, its statements committing by themselves; `info` holds what goes out
    after them, as a session's info does."""

    connection: AsyncConnection
    backend: Backend
    # Whether ended runs and decided reviews queue their spans for export (`Database.traces`): a statement alone
    # writes nothing else, so such an event is not written alone.
    traces: bool = False
    info: dict[str, Any] = field(default_factory=dict)


class _KeptConnection:
    """The autocommit connection one task keeps between its `alone` statements (`Database.keeping_alone`)."""

    def __init__(self, db: Database, task: asyncio.Task[Any]) -> None:
        self.db = db
        # Only the task that opened the block: a task it starts copies its context, and one connection cannot
        # run two statements at once.
        self.task = task
        self._connection: AsyncConnection | None = None
        self._used_at = 0.0
        # What the task's commits queued goes out from a task of its own, in commit order, once the committing task
        # waits: a run's next statement then leaves before the last step's news, which is sent while that statement
        # is at the database (issue 25; bench/README.md, 2026-11-29 10:38), and at most once a spacing.
        self.news: SentInOrder[_News] = SentInOrder(self._send_news, "after-commit", spacing=NEWS_SPACING_SECONDS)

    async def _send_news(self, batch: list[_News]) -> None:
        for events, pending in batch:
            await self.db._after_commit(events, pending)

    async def take(self) -> AsyncConnection:
        if self._connection is not None and time.monotonic() - self._used_at >= engines.IDLE_PING_SECONDS:
            await self.release()  # idle for a while: the pool checks a connection that idled before handing it out
        if self._connection is None:
            self._connection = await self.db._autocommit.connect()
        return self._connection

    def used(self) -> None:
        self._used_at = time.monotonic()

    async def release(self) -> None:
        connection, self._connection = self._connection, None
        if connection is None:
            return
        if self._used_at and not connection.invalidated:
            # Idle since its last statement, not from its check-in: the pool pings it before it goes out again.
            connection.info[engines.IDLE_SINCE] = self._used_at
        await connection.close()


_KEPT: ContextVar[_KeptConnection | None] = ContextVar("vouch_kept_connection", default=None)

_Closable = TypeVar("_Closable", AsyncSession, AsyncConnection)


@asynccontextmanager
async def _closed_at_end(closable: _Closable) -> AsyncIterator[_Closable]:
    """`closable`, closed when the block ends, as SQLAlchemy's `async with` closes it (to its end, even if the
    caller is cancelled meanwhile), but in the calling task while the close need not wait, where SQLAlchemy's
    always closes in a task of its own: its creation and turns of the loop for every transaction, though a close
    after a commit never waits (core/coroutines.py)."""
    try:
        yield closable
    finally:
        await run_to_completion(closable.close())


class Database:
    def __init__(self, url: str, bus: Bus, *, traces: bool = False) -> None:
        """`traces`: the transactions that end a run or decide a review queue its spans for export (with
        OTEL_EXPORTER_OTLP_ENDPOINT set; settings.otel_traces_endpoint)."""
        self.url = url
        self.bus = bus
        self.traces = traces
        self.engine = engines.make_engine(url)
        self.dialect = self.engine.dialect.name
        # What differs between the databases, chosen once; each session carries it (core.backends.backend_of).
        self.backend = backend_for(self.dialect)
        self.wal_checkpoints = self.backend.wal_checkpoints(self.engine, url)
        info = {BACKEND: self.backend, TRACES: traces}
        self._read = async_sessionmaker(self.engine, expire_on_commit=False, info=info)
        self._write = async_sessionmaker(
            self.engine.execution_options(vouch_write=True), expire_on_commit=False, info=info
        )
        # The same pool's connections, each statement committing by itself (`alone`).
        self._autocommit = self.engine.execution_options(isolation_level="AUTOCOMMIT")
        # `reading`'s sessions. Where statements commit by themselves (PostgreSQL), each already reads its own
        # snapshot inside a transaction too (READ COMMITTED): outside one it costs no BEGIN and no ROLLBACK.
        self._reading = async_sessionmaker(
            self._autocommit if self.backend.writes_alone else self.engine, expire_on_commit=False, info=info
        )
        self._event_sinks: list[EventSink] = []
        # Tasks inside a write transaction (with its depth), and those to cancel as soon as it ends.
        self._writing: dict[asyncio.Task[Any], int] = {}
        self._stop_after: set[asyncio.Task[Any]] = set()

    def stop(self, task: asyncio.Task[Any]) -> None:
        """Cancel `task`, but never halfway through one of its transactions: a statement cancelled mid-way
        leaves its connection (on SQLite, with the database's write lock) to be torn down behind our back,
        and the next writer waits. A task inside a transaction is cancelled as that transaction ends."""
        if self._writing.get(task):
            self._stop_after.add(task)
        else:
            task.cancel()

    def add_event_sink(self, sink: EventSink) -> None:
        self._event_sinks.append(sink)

    def remove_event_sink(self, sink: EventSink) -> None:
        if sink in self._event_sinks:
            self._event_sinks.remove(sink)

    async def send_live(self, message: dict[str, Any]) -> None:
        """Hand a message that is no event row (no seq, never replayed) to the sinks that carry such messages.
        Best effort: a watcher who misses it loses a moment's view, never a fact (the stored event follows)."""
        for sink in tuple(self._event_sinks):
            if isinstance(sink, LiveSink):
                try:
                    await sink.live(message)
                except Exception:
                    log.debug("live message to %s failed", message.get("executionId"), exc_info=True)

    def session(self, *, write: bool) -> AsyncSession:
        """A session; the caller owns its one commit point (`commit`)."""
        return (self._write if write else self._read)()

    async def commit(self, session: AsyncSession) -> None:
        pending: list[tuple[str, dict[str, Any]]] = session.info.pop(_PENDING, [])
        events: list[dict[str, Any]] = session.info.pop(_EVENTS, [])
        if self.backend.writes_alone and (pending or events) and not (session.new or session.dirty or session.deleted):
            if await committing_alone(session):
                # Its statements committed as they ran: what they queued leaves before the session hands its
                # connection back (half a millisecond here: a decision's wake-up, issue 25).
                await self._news_out(events, pending)
                await session.commit()
                return
        await session.commit()
        await self._news_out(events, pending)

    async def _news_out(self, events: list[dict[str, Any]], pending: list[tuple[str, dict[str, Any]]]) -> None:
        """What a commit queued, sent now; or, inside a `keeping_alone` block of the current task, after what its
        earlier commits queued, once the task next waits."""
        kept = _KEPT.get()
        if kept is not None and kept.db is self and kept.task is asyncio.current_task():
            if events or pending:
                kept.news.put((events, pending))
            return
        await self._after_commit(events, pending)

    async def _after_commit(self, events: list[dict[str, Any]], pending: list[tuple[str, dict[str, Any]]]) -> None:
        # Events before bus messages: a decision's event then leaves before the wake-up that lets a
        # worker append the next one, so watchers usually see them in order (they reorder by seq anyway).
        for message in events:
            for sink in tuple(self._event_sinks):
                try:
                    await sink(message)
                except Exception:
                    log.warning("event sink failed for %s seq %s", message.get("executionId"), message.get("seq"),
                                exc_info=True)
        for channel, message in pending:
            # The rows are committed: a lost message costs latency (the poll catches up), and
            # must not make the caller believe its transaction failed.
            try:
                await self.bus.publish(channel, message)
            except Exception:
                log.warning("publishing to %s after commit failed", channel, exc_info=True)
        # Out now: the rest of this turn (a request's answer and access log) would otherwise come before them.
        await self.bus.flush()

    @asynccontextmanager
    async def transaction(self) -> AsyncIterator[AsyncSession]:
        """A write session committed on success, rolled back on error."""
        with self._write_in_turn():
            async with _closed_at_end(self.session(write=True)) as session:
                try:
                    yield session
                except BaseException as ended:
                    session.info.pop(_PENDING, None)
                    session.info.pop(_EVENTS, None)
                    try:
                        await session.rollback()
                    except Exception:
                        # A connection invalidated by a cancellation cannot roll back; closing the session
                        # discards it. What the caller must see is why the transaction ended (e.g. the
                        # cancellation), never this.
                        log.debug("rollback after %s failed", type(ended).__name__, exc_info=True)
                    raise
                await self.commit(session)

    @asynccontextmanager
    async def alone(self) -> AsyncIterator[Alone]:
        """A connection whose every statement commits by itself, outside any session, where the backend writes
        that way (`Backend.writes_alone`: PostgreSQL): a step that is one statement then costs neither the
        session's bookkeeping nor BEGIN and COMMIT. What its statements queued (`Alone.info`, as a session's
        info) goes out once the block ends without an error, as after a commit."""
        if not self.backend.writes_alone:
            raise RuntimeError(f"{self.dialect} writes in transactions only")
        with self._write_in_turn():
            kept = _KEPT.get()
            if kept is not None and kept.db is self and kept.task is asyncio.current_task():
                connection = await kept.take()
                alone = Alone(connection, self.backend, self.traces)
                try:
                    yield alone
                except BaseException:
                    # A statement that failed may have left the connection unusable: the next one takes another.
                    await kept.release()
                    raise
                kept.used()
            else:
                async with _closed_at_end(await self._autocommit.connect()) as connection:
                    alone = Alone(connection, self.backend, self.traces)
                    yield alone
            await self._news_out(alone.info.pop(_EVENTS, []), alone.info.pop(_PENDING, []))

    @asynccontextmanager
    async def keeping_alone(self) -> AsyncIterator[None]:
        """Until the block ends, the current task's `alone` statements share one connection, taken at the first
        and handed back at the end: a run's steps, one statement each, then skip the pool's check-out and check-in
        between them (a tenth of a millisecond each, issue 25). A connection left unused for a while (the model
        thinking, a tool working outside) is handed back before the next statement, which takes one from the pool
        as usual (pinged there if it idled). Holds no transaction and no lock: every statement commits by itself.
        What the task's commits queue meanwhile (events, bus messages) leaves in commit order while its next
        statement is at the database, in batches at least `NEWS_SPACING_SECONDS` apart, and all of it before the
        block ends (`_KeptConnection.news`). Nothing is kept where the backend writes in transactions only."""
        task = asyncio.current_task()
        if not self.backend.writes_alone or task is None:
            yield
            return
        kept = _KeptConnection(self, task)
        token = _KEPT.set(kept)
        try:
            yield
        finally:
            _KEPT.reset(token)
            await kept.release()
            # The block's news has left before it ends: nothing its commits queued outlives the run that made it.
            await kept.news.flush(_NEWS_SECONDS)

    @contextmanager
    def _write_in_turn(self) -> Iterator[None]:
        """Count the current task as writing until the block ends, when a `stop` asked for meanwhile happens."""
        task = asyncio.current_task()
        if task is not None:
            self._writing[task] = self._writing.get(task, 0) + 1
        try:
            yield
        finally:
            if task is not None:
                depth = self._writing.pop(task) - 1
                if depth:
                    self._writing[task] = depth
                elif task in self._stop_after:
                    self._stop_after.discard(task)
                    raise asyncio.CancelledError("stopped once its transaction ended")

    @asynccontextmanager
    async def reading(self) -> AsyncIterator[AsyncSession]:
        """A session for reads only, apart from any other: on PostgreSQL its statements run outside a transaction
        (each sees what was committed when it began, as in one), on SQLite in a read transaction of its own."""
        async with _closed_at_end(self._reading()) as session:
            yield session

    async def dispose(self) -> None:
        if self.wal_checkpoints is not None:
            await self.wal_checkpoints.close()
        await self.engine.dispose()
