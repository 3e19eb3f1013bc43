"""What every benchmark shares: the service under test, its clients, and how figures are printed.

A `Stack` is the service as operators run it, on one of two backends:

- `sqlite`: the embedded default, one process (the web app with its in-process worker and bus, as `vouch serve`),
  on a fresh SQLite file;
- `postgresql`: the scale-out shape, a web process and a `vouch worker` process on a scratch PostgreSQL database
  (`vouch_bench_<random>`, dropped afterwards) with Redis (database 15 by default, flushed before and after).

The web process is `bench/server.py`: exactly what `vouch serve` / `vouch web` serve, plus bench-only routes (a bare
JSON route for the status-throughput baseline, and an in-process event writer for the embedded chat fan-out).
The worker of the PostgreSQL stack is the real `vouch worker`.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import aiohttp
import asyncpg  # type: ignore[import-untyped]
import redis.asyncio as aioredis
import sqlalchemy as sa

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.processes import cpu_seconds, web_answers, web_listener  # noqa: E402
from core.accounts import create_api_key, create_user  # noqa: E402
from core.bus import InProcessBus  # noqa: E402
from core.db import Database  # noqa: E402
from core.migrate import upgrade  # noqa: E402
from core.models import Event, Execution  # noqa: E402

BACKENDS = ("sqlite", "postgresql")
PYTHON = sys.executable
VOUCH = str(Path(sys.executable).parent / "vouch")
PG_ADMIN_DSN = os.environ.get("VOUCH_BENCH_PG_DSN", "postgresql://postgres@127.0.0.1:5432/test")
# Keys in a database number the tests do not use. (Pub/sub channels are global to a Redis server whatever the
# number; the bench's channels name its own executions, so nothing it publishes is taken up by anyone else.)
REDIS_URL = os.environ.get("VOUCH_BENCH_REDIS_URL", "redis://127.0.0.1:6379/15")
EMAIL = "bench@example.com"
# A checkpoint gating the task's one step (offline agent vocabulary: agents/offline_plan.py).
PAUSING_TASK: dict[str, Any] = {
    "taskName": "bench",
    "taskDescription": 'Write a note called "a.md" saying "hello".',
    "testMode": "with-verification",
    "assignedReviewer": EMAIL,
    "checkpoints": [{"stage": "Write", "description": "the note", "verificationQuestion": "Write it?"}],
}


# ----------------------------------------------------------------------------------------------- the stack


@dataclass
class Stack:
    backend: str
    work: Path
    database_url: str
    redis_url: str | None
    env: dict[str, str]
    listener: socket.socket  # the web process's, bound here and kept for the stack's life (`bench.server --fd`)
    db: Database
    key: str = ""
    user_id: str = ""
    web: subprocess.Popen[bytes] | None = None
    worker: subprocess.Popen[bytes] | None = None
    _logs: list[Any] = field(default_factory=list)

    @property
    def port(self) -> int:
        port: int = self.listener.getsockname()[1]
        return port

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.key}"}

    def cpu(self) -> tuple[float, float]:
        """CPU seconds used so far by (the web process, the worker process); the same process when embedded."""
        assert self.web is not None
        return cpu_seconds(self.web.pid), cpu_seconds(self.worker_pid)

    @property
    def worker_pid(self) -> int:
        """The process that runs the worker: the web process itself when embedded."""
        proc = self.worker if self.worker is not None else self.web
        assert proc is not None
        return proc.pid

    def _spawn(self, name: str, args: list[str], listener: socket.socket | None = None) -> subprocess.Popen[bytes]:
        log = (self.work / f"{name}.log").open("ab")
        self._logs.append(log)
        fds = () if listener is None else (listener.fileno(),)
        return subprocess.Popen(args, env=self.env, stdout=log, stderr=log, cwd=ROOT, pass_fds=fds)

    def spawn_web(self, name: str, listener: socket.socket, *extra: str) -> subprocess.Popen[bytes]:
        """A web process (`bench.server`) serving on `listener`."""
        return self._spawn(name, [PYTHON, "-m", "bench.server", "--fd", str(listener.fileno()), *extra], listener)

    async def start(self) -> None:
        embedded = self.backend == "sqlite"
        self.web = self.spawn_web("web", self.listener, *(["--worker"] if embedded else []))
        if not embedded:
            self.worker = self._spawn("worker", [VOUCH, "worker"])
        await self._healthy()

    async def _healthy(self) -> None:
        await web_answers(self.base, (self.web, self.worker), f"{self.work}/*.log")
        # The worker logs "worker … started" once its wake-up listener is on its way; then one warm-up
        # execution, run to its end, proves the whole path works before anything is measured.
        log = self.work / ("web.log" if self.worker is None else "worker.log")
        for _ in range(600):
            if " started" in log.read_text(errors="replace"):
                break
            await asyncio.sleep(0.05)
        else:
            raise SystemExit(f"the worker did not start; see {log}")
        await asyncio.sleep(0.2)
        async with self.client() as client:
            body = {"taskName": "warm-up", "taskDescription": "Summarise.", "testMode": "without-verification"}
            async with client.post(f"{self.base}/api/eval/create-task-agent", json=body) as answer:
                created = await answer.json()
                if "executionId" not in created:
                    raise SystemExit(f"the warm-up create answered {answer.status} {created}; see {self.work}/*.log")
                execution_id = created["executionId"]
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            async with self.db.reading() as session:
                if await session.scalar(sa.select(Execution.status).where(Execution.id == execution_id)) == "completed":
                    return
            await asyncio.sleep(0.05)
        raise SystemExit(f"the warm-up execution did not complete; see {self.work}/*.log")

    async def stop(self) -> None:
        for proc in (self.worker, self.web):
            if proc is not None and proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in (self.worker, self.web):
            if proc is not None:
                try:
                    await asyncio.to_thread(proc.wait, 20)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    await asyncio.to_thread(proc.wait)
        self.web = self.worker = None

    async def restart(self) -> None:
        await self.stop()
        await self.start()

    def client(self, connections: int = 0) -> aiohttp.ClientSession:
        return aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=connections), headers=self.headers, timeout=aiohttp.ClientTimeout(60)
        )


async def _pg_admin(statement: str) -> None:
    conn = await asyncpg.connect(PG_ADMIN_DSN)
    try:
        await conn.execute(statement)
    finally:
        await conn.close()


async def _flush_redis(url: str) -> None:
    client = aioredis.Redis.from_url(url)
    try:
        await client.flushdb()
    finally:
        await client.aclose()


@asynccontextmanager
async def stack(backend: str, **env_extra: str) -> AsyncIterator[Stack]:
    """A migrated scratch database, a user with an API key, and the service's processes running on them."""
    work = Path(tempfile.mkdtemp(prefix=f"vouch-bench-{backend}-"))
    pg_name = None
    redis_url = None
    if backend == "sqlite":
        database_url = f"sqlite+aiosqlite:///{work / 'bench.sqlite3'}"
    elif backend == "postgresql":
        pg_name = f"vouch_bench_{secrets.token_hex(6)}"
        await _pg_admin(f"CREATE DATABASE {pg_name}")
        database_url = f"postgresql+asyncpg://{PG_ADMIN_DSN.split('://', 1)[1].rsplit('/', 1)[0]}/{pg_name}"
        redis_url = REDIS_URL
        await _flush_redis(redis_url)
    else:
        raise SystemExit(f"unknown backend {backend!r}; one of {', '.join(BACKENDS)}")
    secret_key = secrets.token_urlsafe(48)
    env = {k: v for k, v in os.environ.items() if not k.startswith("VOUCH_")}
    listener = web_listener()
    port = listener.getsockname()[1]
    env.update(
        VOUCH_DATA_DIR=str(work),
        VOUCH_DATABASE_URL=database_url,
        VOUCH_SECRET_KEY=secret_key,
        VOUCH_BASE_URL=f"http://127.0.0.1:{port}",
        # Limits stay on (their checks run on every request) but high enough never to refuse the load.
        VOUCH_RATE_LIMIT="1000000000",
        VOUCH_CONCURRENCY_LIMIT="1000000000",
        PYTHONPATH=str(ROOT),
        **env_extra,
    )
    if redis_url:
        env["VOUCH_REDIS_URL"] = redis_url
    db: Database | None = None
    the_stack: Stack | None = None
    stopped_by_signal = _cancel_on_sigterm()
    try:
        await asyncio.to_thread(upgrade, database_url)
        db = Database(database_url, InProcessBus())
        the_stack = Stack(backend, work, database_url, redis_url, env, listener, db)
        async with db.transaction() as session:
            user = await create_user(session, EMAIL)
            new = await create_api_key(
                session, user, name="bench", scopes=["eval:manage"], secret_key=secret_key.encode()
            )
            the_stack.key, the_stack.user_id = new.secret, user.id
        await the_stack.start()
        yield the_stack
    finally:
        if stopped_by_signal:
            asyncio.get_running_loop().remove_signal_handler(signal.SIGTERM)
        if the_stack is not None:
            await the_stack.stop()
            for log in the_stack._logs:
                log.close()
        listener.close()
        if db is not None:
            await db.dispose()
        if pg_name is not None:
            await _pg_admin(f"DROP DATABASE IF EXISTS {pg_name} WITH (FORCE)")
        if redis_url:
            await _flush_redis(redis_url)
        if os.environ.get("VOUCH_BENCH_KEEP"):
            print(f"kept {work}", flush=True)
        else:
            shutil.rmtree(work, ignore_errors=True)


# ----------------------------------------------------------------------------------------------- helpers


def _cancel_on_sigterm() -> bool:
    """A bench stopped by SIGTERM (`timeout`, the peers' runner) would die at once and leave its web and worker
    processes running, its database and data dir behind. The signal cancels the task that holds the stack instead,
    so that its `finally` stops them. Only on the main thread, where a loop may take signals; whether it did."""
    task = asyncio.current_task()
    if task is None or threading.current_thread() is not threading.main_thread():
        return False
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, task.cancel)
    return True


async def create_executions(st: Stack, count: int, body: dict[str, Any], parallel: int = 8) -> list[str]:
    """Create `count` executions through the API, `parallel` at a time (setting up, not measuring)."""
    ids: list[str] = []
    gate = asyncio.Semaphore(parallel)

    async def one(client: aiohttp.ClientSession) -> None:
        async with gate, client.post(f"{st.base}/api/eval/create-task-agent", json=body) as answer:
            data = await answer.json()
            if answer.status != 201:
                raise SystemExit(f"create failed: {answer.status} {data}")
            ids.append(data["executionId"])

    async with st.client() as client:
        await asyncio.gather(*(one(client) for _ in range(count)))
    return ids


async def wait_for_status(st: Stack, ids: Sequence[str], status: str, timeout: float = 600.0) -> None:
    deadline = time.monotonic() + timeout
    wanted = set(ids)
    while True:
        async with st.db.reading() as session:
            done = 0
            for chunk in range(0, len(ids), 500):
                part = list(ids)[chunk : chunk + 500]
                done += (
                    await session.scalar(
                        sa.select(sa.func.count()).where(Execution.id.in_(part), Execution.status == status)
                    )
                    or 0
                )
        if done >= len(wanted):
            return
        if time.monotonic() > deadline:
            raise SystemExit(f"only {done} of {len(wanted)} executions reached {status} within {timeout} s")
        await asyncio.sleep(0.1)  # a benchmark's progress check


async def events_of(st: Stack, ids: Sequence[str]) -> dict[str, list[tuple[int, str, datetime, dict[str, Any]]]]:
    """Every event of these executions, (seq, type, created_at, payload) in seq order."""
    found: dict[str, list[tuple[int, str, datetime, dict[str, Any]]]] = {i: [] for i in ids}
    async with st.db.reading() as session:
        for chunk in range(0, len(ids), 500):
            rows = await session.execute(
                sa.select(Event.execution_id, Event.seq, Event.type, Event.created_at, Event.payload)
                .where(Event.execution_id.in_(list(ids)[chunk : chunk + 500]))
                .order_by(Event.execution_id, Event.seq)
            )
            for execution_id, seq, type_, at, payload in rows:
                found[execution_id].append((seq, type_, at, payload))
    return found


async def wait_for_event(
    st: Stack, ids: Sequence[str], after: Callable[[str], int], timeout: float = 120.0
) -> dict[str, list[tuple[int, str, datetime, dict[str, Any]]]]:
    """Until every execution has an event with seq > after(id); returns all their events."""
    deadline = time.monotonic() + timeout
    while True:
        events = await events_of(st, ids)
        missing = [i for i in ids if not any(seq > after(i) for seq, *_ in events[i])]
        if not missing:
            return events
        if time.monotonic() > deadline:
            raise SystemExit(f"{len(missing)} of {len(ids)} executions saw no new event within {timeout} s")
        await asyncio.sleep(0.1)


def common_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--quick", action="store_true", help="tiny counts: runs in seconds (what CI runs)")
    parser.add_argument(
        "--backends", default=",".join(BACKENDS), help="comma-separated, of: sqlite (embedded), postgresql (+Redis)"
    )


def backends_of(args: argparse.Namespace) -> list[str]:
    chosen = [b.strip() for b in str(args.backends).split(",") if b.strip()]
    unknown = set(chosen) - set(BACKENDS)
    if unknown or not chosen:
        raise SystemExit(f"--backends: unknown {sorted(unknown)}; use {','.join(BACKENDS)}")
    return chosen


Measure = Callable[[Stack, bool], Awaitable[None]]


def main_of(measure: Measure, description: str) -> None:
    """A bench script's command line: each chosen backend gets a stack of its own."""
    parser = argparse.ArgumentParser(description=description)
    common_arguments(parser)
    args = parser.parse_args()

    async def run() -> None:
        for backend in backends_of(args):
            async with stack(backend) as st:
                await measure(st, args.quick)

    run_until_stopped(run())


def run_until_stopped(main: Coroutine[Any, Any, None]) -> None:
    """`asyncio.run(main)`; stopped by SIGTERM (which cancels it: `_cancel_on_sigterm`), the process ends as the
    signal would have ended it, with 143, once its stack is stopped."""
    try:
        asyncio.run(main)
    except asyncio.CancelledError:
        raise SystemExit(128 + signal.SIGTERM) from None
