"""Chat fan-out: events/s delivered to 100 and to 1,000 watchers of one room on one web process, and the latency
from an event's commit to a watcher's receipt.

    .venv/bin/python -m bench.chat_fanout [--quick] [--backends sqlite,postgresql]

The watchers are minimal Socket.IO clients speaking the wire protocol directly (python-socketio's client costs
far more CPU per message than the server, and would measure itself), all in this process. The writer commits
events as the worker does:

- SQLite (embedded): inside the web process, through its own Database (`POST /bench/emit` of bench/server.py),
  whose event sink emits into the room in process, as `vouch serve`'s worker does;
- PostgreSQL + Redis: in a process of its own with the write-only Redis emitter registered as `vouch worker`
  registers it; the web process's manager hears it through Redis and delivers to its local room.

Commit time is taken by an event sink registered before the emitter (the moment core.db's commit returns);
receipts are timed by the watchers; both on CLOCK_MONOTONIC, one clock for the machine. Per watcher count:

- burst: events committed as fast as the database takes them (batches of 10 per commit); deliveries/s =
  watchers x events / (first commit -> last receipt), with the commit->receipt latency under that load;
- paced: one event per commit at a steady rate (open loop) the server keeps up with; commit->receipt latency,
  the number that tells how fresh a watcher's page is.

`chat-fanout-uncompressed` is the same with watchers that offer no compression (as Node's socket.io server
refuses it by default): what the server's own fan-out costs, the figure set against Node's (`python -m bench
--peers`).

Writer, web process, Redis and watchers share this machine's cores: a floor for a web process with cores of its own.
"""

from __future__ import annotations

import asyncio
import gc
import json
import multiprocessing
import re
import time
from collections.abc import Iterator
from contextlib import contextmanager
from multiprocessing.connection import Connection
from typing import Any

import aiohttp

from bench.common import Stack, main_of
from bench.report import figure, note, percentile, spread
from chat.fanout import WorkerEmitter
from core.bus import InProcessBus
from core.db import Database
from core.events import append_any_event
from core.ids import new_id
from core.links import chat_view_token
from core.models import Execution, utcnow

SEQ = re.compile(rb'"seq":(\d+)')
BATCH = 10


class Watcher:
    """One websocket speaking Engine.IO 4 / Socket.IO 5 to the /chat namespace, noting when each event came."""

    def __init__(self, compress: bool = True) -> None:
        self.receipts: list[tuple[int, float]] = []
        self.compress = compress

    async def start(self, session: aiohttp.ClientSession, base: str, execution_id: str, token: str) -> None:
        url = base.replace("http", "ws", 1) + "/socket.io/?EIO=4&transport=websocket"
        # permessage-deflate offered as browsers offer it: the server then compresses every frame for every
        # watcher on its own (each connection keeps its own compression context), a cost per recipient that a
        # client offering nothing would leave out of the figure.
        self.ws = await session.ws_connect(url, max_msg_size=0, compress=15 if self.compress else 0)
        opened = await self.ws.receive_str()
        assert opened.startswith("0"), opened
        auth = {"executionId": execution_id, "token": token}
        await self.ws.send_str("40/chat," + json.dumps(auth))
        connected = await self.ws.receive_str()
        assert connected.startswith("40/chat,"), connected
        join = {"executionId": execution_id, "token": token, "afterSeq": 10**9}
        await self.ws.send_str("42/chat,1" + json.dumps(["join_execution", join]))
        while True:
            answer = await self.ws.receive_str()
            if answer.startswith("43/chat,1"):
                assert '"ok":true' in answer.replace(" ", ""), answer
                break
        self.reader = asyncio.create_task(self._read())

    async def _read(self) -> None:
        async for message in self.ws:
            data = message.data.encode() if isinstance(message.data, str) else message.data
            if data == b"2":  # the server's ping
                await self.ws.send_str("3")
            elif data.startswith(b"42/chat,"):
                found = SEQ.search(data)
                if found is not None:
                    # CLOCK_MONOTONIC: one clock for every process on this machine, the writer's too.
                    self.receipts.append((int(found.group(1)), time.monotonic()))

    async def close(self) -> None:
        self.reader.cancel()
        await self.ws.close()


async def new_room(db: Database, user_id: str, secret_key: bytes) -> tuple[str, str]:
    execution_id = new_id("exe")
    async with db.transaction() as session:
        session.add(
            Execution(
                id=execution_id, user_id=user_id, task_name="bench", task_description="bench",
                test_mode="without-verification", agent_model="offline", status="awaiting_review", created_at=utcnow(),
                last_seq=0, lease_epoch=0,
            )
        )  # fmt: skip
    return execution_id, chat_view_token(secret_key, execution_id)


async def write(db: Database, execution_id: str, events: int, batch: int, rate: float | None) -> None:
    loop = asyncio.get_running_loop()
    start = loop.time()
    for first in range(0, events, batch):
        if rate:
            await asyncio.sleep(max(0.0, start + first / rate - loop.time()))
        async with db.transaction() as session:
            for n in range(first, min(events, first + batch)):
                await append_any_event(session, execution_id, "agent.message", {"text": f"step {n} " + "x" * 120})


async def _write_and_stamp(
    database_url: str, redis_url: str, execution_id: str, events: int, batch: int, rate: float | None
) -> dict[int, float]:
    """The worker's side: commit events, emit them as `vouch worker` does, note each commit's moment."""
    db = Database(database_url, InProcessBus())
    stamps: dict[int, float] = {}

    async def stamp(message: dict[str, Any]) -> None:
        stamps[message["seq"]] = time.monotonic()

    # The stamp before the emitter: sinks run in registration order once the commit has returned.
    db.add_event_sink(stamp)
    emitter = WorkerEmitter(redis_url)
    db.add_event_sink(emitter.sink)
    try:
        await write(db, execution_id, events, batch, rate)
    finally:
        await db.dispose()
        await emitter.close()
    return stamps


def writer_process(conn: Connection, *args: Any) -> None:
    conn.send(asyncio.run(_write_and_stamp(*args)))
    conn.close()


def run_writer(*args: Any) -> dict[int, float]:
    """The writer in a process of its own, as a worker is: it must not share a loop with 1,000 readers."""
    context = multiprocessing.get_context("spawn")
    receiving, sending = context.Pipe(duplex=False)
    process = context.Process(target=writer_process, args=(sending, *args))
    process.start()
    stamps: dict[int, float] = receiving.recv()
    process.join()
    return stamps


async def until_delivered(watchers: list[Watcher], expected: int, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while sum(len(w.receipts) for w in watchers) < expected:
        if time.monotonic() > deadline:
            got = sum(len(w.receipts) for w in watchers)
            raise SystemExit(f"only {got} of {expected} deliveries within {timeout} s")
        await asyncio.sleep(0.02)  # a benchmark's progress check, not synchronisation of a test


@contextmanager
def collector_paused() -> Iterator[None]:
    """No garbage collection in this process while a phase is measured, as timeit does.

    The watchers stand in for browsers on machines of their own, but here they share one heap: with 1,000 of
    them its full collections took 100-190 ms (seen with gc.callbacks), stopped every watcher's reading at once
    and were the paced p99, a pause of the load generator's, not the service's. The web process and the
    writer collect as they always do."""
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


async def write_embedded(st: Stack, execution_id: str, events: int, batch: int, rate: float | None) -> dict[int, float]:
    """The embedded writer: events committed inside the web process (bench/server.py's /bench/emit)."""
    body = {"executionId": execution_id, "events": events, "batch": batch, "rate": rate or 0}
    async with aiohttp.ClientSession() as client, client.post(f"{st.base}/bench/emit", json=body) as answer:
        stamps: dict[str, float] = (await answer.json())["stamps"]
    return {int(seq): at for seq, at in stamps.items()}


async def measure_one(
    st: Stack, n: int, events: int, paced_events: int, rate: float, name: str = "chat-fanout", compress: bool = True
) -> None:
    secret_key = st.env["VOUCH_SECRET_KEY"].encode()
    results: dict[str, tuple[float, list[float]]] = {}
    connector = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(connector=connector) as session:
        for phase, count, pace in (("burst", events, None), ("paced", paced_events, rate)):
            execution_id, token = await new_room(st.db, st.user_id, secret_key)
            watchers = [Watcher(compress) for _ in range(n)]
            for chunk in range(0, n, 50):
                batch = watchers[chunk : chunk + 50]
                await asyncio.gather(*(w.start(session, st.base, execution_id, token) for w in batch))
            per_commit = BATCH if pace is None else 1
            cpu_web, cpu_here, wall = st.cpu()[0], time.process_time(), time.monotonic()
            with collector_paused():
                if st.backend == "sqlite":
                    stamps = await write_embedded(st, execution_id, count, per_commit, pace)
                else:
                    assert st.redis_url is not None
                    stamps = await asyncio.to_thread(
                        run_writer, st.database_url, st.redis_url, execution_id, count, per_commit, pace
                    )
                await until_delivered(watchers, n * count, timeout=max(60.0, count * n / 2000))
            receipts = [receipt for w in watchers for receipt in w.receipts]
            missing = sorted({seq for seq, _ in receipts} - set(stamps))
            if missing:
                raise SystemExit(
                    f"{len(missing)} received events have no commit stamp ({len(stamps)} stamps), e.g. {missing[:5]}"
                )
            latencies = [(at - stamps[seq]) * 1000 for seq, at in receipts]
            seconds = max(at for _, at in receipts) - min(stamps.values())
            results[phase] = (len(receipts) / seconds, latencies)
            wall = time.monotonic() - wall
            web_busy, here_busy = (st.cpu()[0] - cpu_web) / wall, (time.process_time() - cpu_here) / wall
            note(f"{n} watchers, {phase}: CPU over {wall:.1f} s: web process {web_busy:.0%}, watchers {here_busy:.0%}")
            await asyncio.gather(*(w.close() for w in watchers))
    burst_rate, burst_latency = results["burst"]
    _, paced_latency = results["paced"]
    figure(
        name,
        st.backend,
        f"watchers={n} burst {burst_rate:,.0f} deliveries/s | paced {rate:g} events/s commit->receipt "
        f"{spread(paced_latency)} | burst commit->receipt {spread(burst_latency)}",
        ">= 10,000 deliveries/s, paced p99 <= 100 ms",
        burst_rate >= 10_000 and percentile(paced_latency, 0.99) <= 100,
    )


async def measure(st: Stack, quick: bool, name: str = "chat-fanout", compress: bool = True) -> None:
    counts, events, paced_events, rate = ([20], 100, 40, 40.0) if quick else ([100, 1000], 300, 100, 10.0)
    for n in counts:
        await measure_one(st, n, events, paced_events, rate, name, compress)
    offered = "permessage-deflate offered" if compress else "no compression offered"
    note(f"burst: {events} events, {BATCH} per commit; paced: {paced_events} at {rate:g}/s, one per commit; {offered}")


async def measure_uncompressed(st: Stack, quick: bool) -> None:
    await measure(st, quick, "chat-fanout-uncompressed", compress=False)


if __name__ == "__main__":
    main_of(measure, __doc__.split("\n\n")[0])
