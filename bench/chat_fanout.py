"""Benchmark: chat fan-out from a worker, through Redis, to N watchers of one room on one web process.

    .venv/bin/python bench/chat_fanout.py            # 100 and 1,000 watchers
    .venv/bin/python bench/chat_fanout.py --quick    # a small run (20 watchers, few events)

It starts a real `vouch web` (Socket.IO on Redis) on a fresh SQLite database (or --database-url), and plays
the worker itself: events are committed through core.db with the write-only Redis emitter registered as
`vouch worker` registers it. The watchers are minimal Socket.IO clients speaking the wire protocol directly
(python-socketio's client costs far more CPU per message than the server, and would measure itself).

Printed per watcher count:
- burst: events committed as fast as the database takes them; deliveries/s = watchers x events / (first
  commit -> last receipt), with the commit->receipt latency under that load;
- paced: events at a steady rate the server keeps up with; p50/p99 commit->receipt latency, the number that
  tells how fresh a watcher's page is.

The writer runs in a process of its own, as a worker does. Commit time is taken there by an event sink
registered before the emitter (the moment core.db's commit returns from the database); receipts are timed
by the watchers; both on CLOCK_MONOTONIC, one clock for the machine. Writer, web process, Redis and
watchers share this machine's cores, so the numbers are a floor for a web process with cores of its own.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import os
import re
import secrets
import signal
import socket
import subprocess
import sys
import tempfile
import time
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import aiohttp

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from chat.fanout import WorkerEmitter  # noqa: E402
from core.accounts import create_user  # noqa: E402
from core.bus import InProcessBus  # noqa: E402
from core.db import Database  # noqa: E402
from core.events import append_event  # noqa: E402
from core.ids import new_id  # noqa: E402
from core.links import chat_view_token  # noqa: E402
from core.migrate import upgrade  # noqa: E402
from core.models import Execution, utcnow  # noqa: E402
from core.settings import normalise_database_url  # noqa: E402

SEQ = re.compile(rb'"seq":(\d+)')
VOUCH = str(Path(sys.executable).parent / "vouch")


class Watcher:
    """One websocket speaking Engine.IO 4 / Socket.IO 5 to the /chat namespace, noting when each event came."""

    def __init__(self) -> None:
        self.receipts: list[tuple[int, float]] = []

    async def start(self, session: aiohttp.ClientSession, base: str, execution_id: str, token: str) -> None:
        url = base.replace("http", "ws", 1) + "/socket.io/?EIO=4&transport=websocket"
        self.ws = await session.ws_connect(url, max_msg_size=0)
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


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


async def new_room(db: Database, user_id: str, secret_key: bytes) -> tuple[str, str]:
    execution_id = new_id("exe")
    async with db.transaction() as session:
        session.add(
            Execution(
                id=execution_id, user_id=user_id, task_name="bench", task_description="bench",
                test_mode="without-verification", agent_model="offline", status="running", created_at=utcnow(),
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
                await append_event(session, execution_id, "agent.message", {"text": f"step {n} " + "x" * 120})


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


async def measure(db: Database, base: str, database_url: str, user_id: str, key: bytes, n: int, args: Any) -> None:
    connector = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(connector=connector) as session:
        for phase, events, rate in (("burst", args.events, None), ("paced", args.paced_events, args.rate)):
            execution_id, token = await new_room(db, user_id, key)
            watchers = [Watcher() for _ in range(n)]
            for chunk in range(0, n, 50):
                batch = watchers[chunk : chunk + 50]
                await asyncio.gather(*(w.start(session, base, execution_id, token) for w in batch))
            stamps = await asyncio.to_thread(
                run_writer, database_url, args.redis_url, execution_id, events, args.batch if rate is None else 1, rate
            )
            await until_delivered(watchers, n * events, timeout=max(60.0, events * n / 2000))
            receipts = [receipt for w in watchers for receipt in w.receipts]
            latencies = [at - stamps[seq] for seq, at in receipts]
            seconds = max(at for _, at in receipts) - min(stamps.values())
            print(
                f"{n:>8} {phase:>6} {events:>7} {len(receipts):>11} {seconds:>8.2f} {len(receipts) / seconds:>13,.0f} "
                f"{percentile(latencies, 0.5) * 1000:>8.1f} {percentile(latencies, 0.99) * 1000:>8.1f}",
                flush=True,
            )
            await asyncio.gather(*(w.close() for w in watchers))


async def main(args: argparse.Namespace, base: str, database_url: str, secret_key: str, log: Path) -> None:
    db = Database(database_url, InProcessBus())
    try:
        async with aiohttp.ClientSession() as probe:
            for _ in range(300):
                try:
                    async with probe.get(f"{base}/healthz") as answer:
                        if answer.status == 200:
                            break
                except aiohttp.ClientError:
                    await asyncio.sleep(0.1)
            else:
                raise SystemExit(f"vouch web did not start; see {log}")
        async with db.transaction() as session:
            user_id = (await create_user(session, "bench@example.com")).id
        print(f"vouch web on {base}, database {database_url.split(':')[0]}, Redis {args.redis_url}")
        print(f"burst: batches of {args.batch} events per commit; paced: {args.rate:g} events/s, one per commit")
        print(f"{'watchers':>8} {'phase':>6} {'events':>7} {'deliveries':>11} {'seconds':>8} "
              f"{'deliveries/s':>13} {'p50 ms':>8} {'p99 ms':>8}")  # fmt: skip
        for n in args.watchers:
            await measure(db, base, database_url, user_id, secret_key.encode(), n, args)
    finally:
        await db.dispose()


def run(args: argparse.Namespace) -> None:
    work = Path(tempfile.mkdtemp(prefix="vouch-bench-"))
    database_url = normalise_database_url(args.database_url or f"sqlite:///{work / 'bench.sqlite3'}")
    secret_key = secrets.token_urlsafe(48)
    upgrade(database_url)
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("VOUCH_")}
    env.update(
        VOUCH_DATA_DIR=str(work), VOUCH_DATABASE_URL=database_url, VOUCH_SECRET_KEY=secret_key,
        VOUCH_REDIS_URL=args.redis_url,
    )  # fmt: skip
    log_path = work / "web.log"
    with log_path.open("wb") as log:
        web = subprocess.Popen([VOUCH, "web", "--port", str(port)], env=env, stdout=log, stderr=log)
        try:
            asyncio.run(main(args, f"http://127.0.0.1:{port}", database_url, secret_key, log_path))
        finally:
            web.send_signal(signal.SIGTERM)
            web.wait(timeout=15)


def parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="a small run: 20 watchers, few events")
    parser.add_argument("--watchers", default="100,1000", help="comma-separated watcher counts")
    parser.add_argument("--events", type=int, default=300, help="events in the burst phase")
    parser.add_argument("--paced-events", type=int, default=100, help="events in the paced phase")
    parser.add_argument("--rate", type=float, default=10.0, help="events per second in the paced phase")
    parser.add_argument("--batch", type=int, default=10, help="events per commit in the burst phase")
    parser.add_argument("--database-url", help="default: a fresh SQLite file")
    parser.add_argument("--redis-url", default=os.environ.get("VOUCH_REDIS_URL", "redis://127.0.0.1:6379/0"))
    args = parser.parse_args()
    args.watchers = [int(n) for n in args.watchers.split(",")]
    if args.quick:
        args.watchers, args.events, args.paced_events, args.rate = [20], 100, 40, 40.0
    return args


if __name__ == "__main__":
    run(parse())
