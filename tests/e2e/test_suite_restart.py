"""A suite through a restart (issue 23, item 3): 28 runs (7 tasks x 2 models x with and without verification) on
real processes - `vouch serve` (the web app with its worker) and a second `vouch worker` - with a reviewer deciding
the with-verification runs over the API.

Undecided, the with-verification runs fill the key's 10 slots and the rest of the suite waits. Then four are
approved over the API and the serve process is killed (SIGKILL) at once, while those runs resume, finish and free
slots that the schedulers fill; it is started again on the same port, and the reviewer decides the rest as they
come, riding out the restart.

Then: nothing lost (every run ends, and ends once), nothing run twice (each planned run has one execution and the
suite no other; each execution's events are gapless; each tool call ran once: one `tool.call` and one
`tool.result` event per call, one row per step; each waiting run decided once), and never more than 10 in
progress. The last is watched from the database by an observer task that counts the key's queued, running and
awaiting-review executions all through the run, restart included, and must also have seen the limit reached
(else it proves nothing).

The second model is the model agent against the local OpenAI-compatible fake (it writes a file, then finishes).
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
from collections import Counter
from collections.abc import AsyncIterator
from contextlib import ExitStack, asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import httpx
import sqlalchemy as sa

from core.db import Database
from core.models import Decision, Event, Execution, SuiteRun, ToolCall
from core.settings import Settings
from core.vocabulary import ACTIVE, EventType
from tests.conftest import bearer, make_account
from tests.support.fake_llm import Answer, call, fake_llm
from tests.support.ports import free_port
from tests.support.processes import VOUCH, running, vouch_env, wait_until_healthy
from tests.support.waiting import until

OWNER = "suite-owner@example.com"
SUITES = "/api/eval/suites"
LIMIT = 10
MODEL = "openai:scripted"
TASKS = 7
PASSES = [{"type": "regex", "pattern": "."}]


def write_then_finish(body: dict[str, Any]) -> Answer:
    """The model agent's script: one file written, then done (from the conversation alone, so a resumed run asks
    again from where it was)."""
    if not any(message["role"] == "tool" for message in body["messages"]):
        return call("write_file", path="note.md", content="hello")
    return call("finish", summary="wrote note.md")


def tasks() -> list[dict[str, Any]]:
    return [
        {
            "taskName": f"Note {n}",
            "taskDescription": f'Write a note called "note{n}.md" saying "hello {n}". Then summarise.',
            "assignedReviewer": OWNER,
            "checkpoints": [{"stage": "Write", "verificationQuestion": "Write the note?"}],
            "scorers": PASSES,
        }
        for n in range(TASKS)
    ]


@dataclass
class Observer:
    """Counts the key's executions in progress, from the database, until stopped."""

    db: Database
    key_id: str
    samples: list[int] = field(default_factory=list)
    stop: asyncio.Event = field(default_factory=asyncio.Event)

    async def count(self) -> int:
        async with self.db.reading() as session:
            found = await session.scalar(
                sa.select(sa.func.count()).where(Execution.api_key_id == self.key_id, Execution.status.in_(ACTIVE))
            )
        return int(found or 0)

    async def watch(self) -> None:
        while not self.stop.is_set():
            self.samples.append(await self.count())
            # Between samples, a pause that lets the processes under test have the CPU; the counts themselves come
            # from the database, never from timing.
            try:
                await asyncio.wait_for(self.stop.wait(), timeout=0.02)
            except TimeoutError:
                pass


@asynccontextmanager
async def observing(db: Database, key_id: str) -> AsyncIterator[Observer]:
    observer = Observer(db, key_id)
    task = asyncio.create_task(observer.watch())
    try:
        yield observer
    finally:
        observer.stop.set()
        await task


class Serve:
    """`vouch serve` on a fixed port, killed and started again on it."""

    def __init__(self, settings: Settings, env: dict[str, str], port: int, stack: ExitStack) -> None:
        self.settings, self.env, self.port, self.stack = settings, env, port, stack
        self.base = f"http://127.0.0.1:{port}"
        self.starts = 0
        self.proc: subprocess.Popen[bytes] | None = None

    async def start(self) -> None:
        self.starts += 1
        log = self.settings.data_dir / f"serve-{self.starts}.log"
        self.proc = self.stack.enter_context(running([VOUCH, "serve", "--port", str(self.port)], self.env, log))
        await wait_until_healthy(self.base, self.proc, log)

    def kill(self) -> None:
        assert self.proc is not None
        os.kill(self.proc.pid, signal.SIGKILL)
        assert self.proc.wait(timeout=10) == -signal.SIGKILL


class Reviewer:
    """Decides every waiting checkpoint of the suite over the API as it comes; rides out the web's restart."""

    def __init__(self, base: str, key: str, suite_id: str) -> None:
        self.base, self.key, self.suite_id = base, key, suite_id
        self.decided: Counter[str] = Counter()
        self.refused_while_down = 0

    async def runs(self, http: httpx.AsyncClient) -> list[dict[str, Any]]:
        found: list[dict[str, Any]] = []
        cursor: str | None = None
        while True:
            params = {"limit": "500", **({"cursor": cursor} if cursor else {})}
            answer = await http.get(f"{SUITES}/{self.suite_id}/runs", params=params, headers=bearer(self.key))
            assert answer.status_code == 200, answer.text
            page = answer.json()
            found.extend(page["runs"])
            cursor = page["nextCursor"]
            if cursor is None:
                return found

    async def decide_waiting(self, http: httpx.AsyncClient, at_most: int | None = None) -> dict[str, Any] | None:
        """One round: decide what waits (`at_most` of them); the suite's record once it has completed, else None."""
        try:
            for run in await self.runs(http):
                if run["status"] != "awaiting_review":
                    continue
                execution_id = run["executionId"]
                record = (await http.get(f"/api/eval/status/{execution_id}", headers=bearer(self.key))).json()
                for checkpoint in record["checkpoints"]:
                    if checkpoint["status"] != "awaiting_review" or sum(self.decided.values()) == at_most:
                        continue
                    path = f"/api/eval/executions/{execution_id}/checkpoints/{checkpoint['checkpointId']}/decision"
                    answer = await http.post(path, json={"decision": "approve"}, headers=bearer(self.key))
                    # 409: decided already (an answer sent just before the restart that the test did not see).
                    assert answer.status_code in (200, 409), answer.text
                    if answer.status_code == 200:
                        self.decided[execution_id] += 1
            record = (await http.get(f"{SUITES}/{self.suite_id}", headers=bearer(self.key))).json()
        except httpx.TransportError:
            self.refused_while_down += 1
            return None
        if at_most is not None:
            assert sum(self.decided.values()) == at_most, self.decided
        return record if record["status"] == "completed" else None


async def test_a_suite_survives_a_restart_of_its_web_process_within_the_limit(settings: Settings, db: Database) -> None:
    owner = await make_account(db, settings, OWNER, "eval:manage")
    port = free_port()
    async with fake_llm(then=write_then_finish) as llm:
        env = vouch_env(
            settings,
            VOUCH_AGENT_BASE_URL=llm.base_url,
            VOUCH_AGENT_REQUEST_RETRIES="0",
            VOUCH_WORKER_LEASE_SECONDS="1.5",
            VOUCH_WORKER_POLL_SECONDS="0.2",
            VOUCH_RATE_LIMIT="1000000",
            VOUCH_CONCURRENCY_LIMIT=str(LIMIT),
            VOUCH_BASE_URL=f"http://127.0.0.1:{port}",
        )
        with ExitStack() as stack:
            serve = Serve(settings, env, port, stack)
            await serve.start()
            stack.enter_context(running([VOUCH, "worker"], env, settings.data_dir / "worker.log"))
            async with (
                observing(db, owner.key_id) as observer,
                httpx.AsyncClient(base_url=serve.base, timeout=30) as http,
            ):
                body = {"name": "Restart", "tasks": tasks(), "models": ["offline", MODEL], "testMode": "both"}
                created = await http.post(SUITES, json=body, headers=bearer(owner.key))
                assert created.status_code == 201, created.text
                suite_id = created.json()["suiteId"]
                assert created.json()["runs"] == TASKS * 2 * 2
                reviewer = Reviewer(serve.base, owner.key, suite_id)

                async def held() -> bool | None:
                    # Undecided, the with-verification runs hold every slot: LIMIT of them wait for review, the
                    # runs without verification started meanwhile have finished, and every other run waits to start.
                    # How many finished is not fixed: on PostgreSQL two schedulers skip each other's locked row, so
                    # a later run may start before an earlier one (9 finish in position order; 8 were seen).
                    async with db.reading() as session:
                        states = Counter(
                            await session.scalars(sa.select(SuiteRun.state).where(SuiteRun.suite_id == suite_id))
                        )
                        statuses = Counter(
                            await session.scalars(sa.select(Execution.status).where(Execution.suite_id == suite_id))
                        )
                    assert max(observer.samples, default=0) <= LIMIT, Counter(observer.samples)
                    last_seen[:] = [states, statuses]
                    started = sum(statuses.values())
                    waiting = statuses["awaiting_review"] == LIMIT and statuses["completed"] == started - LIMIT
                    return True if waiting and states["pending"] == TASKS * 2 * 2 - started else None

                last_seen: list[Counter[str]] = []
                try:
                    await until(held, timeout=120)
                except AssertionError as stalled:
                    # Which runs stalled, and what the processes said: a stall here once gave nothing else to go on.
                    logs = {path.name: path.read_text()[-3000:] for path in settings.data_dir.glob("*.log")}
                    raise AssertionError(f"runs {last_seen[:1]}, executions {last_seen[1:]}; logs {logs}") from stalled
                assert max(observer.samples) == LIMIT
                # Four approvals over the API, and the serve process is killed at once: those runs go on, finish
                # and free slots that the schedulers fill, while the process dies under some of it.
                await reviewer.decide_waiting(http, at_most=4)
                serve.kill()
                down = await observer.count()
                await serve.start()
                record = await until(lambda: reviewer.decide_waiting(http), timeout=240)
            assert observer.samples and 1 <= down <= LIMIT  # the kill left runs in progress

    # Nothing lost: every planned run started once and ended.
    assert record["progress"] == {"total": 28, "pending": 0, "active": 0, "finished": 28, "cancelled": 0}
    assert sum(group["runs"] for group in record["byModel"]) == 28 and len(record["byModel"]) == 4
    async with db.reading() as session:
        runs = list(await session.scalars(sa.select(SuiteRun).where(SuiteRun.suite_id == suite_id)))
        executions = {
            e.id: e for e in await session.scalars(sa.select(Execution).where(Execution.suite_id == suite_id))
        }
        events = list(
            await session.scalars(
                sa.select(Event).where(Event.execution_id.in_(list(executions))).order_by(Event.execution_id, Event.seq)
            )
        )
        tool_rows = list(await session.scalars(sa.select(ToolCall).where(ToolCall.execution_id.in_(list(executions)))))
        decisions = list(await session.scalars(sa.select(Decision).where(Decision.execution_id.in_(list(executions)))))
    assert len(runs) == 28 and {run.state for run in runs} == {"started"}
    # Nothing run twice: one execution per run, and the suite has no other.
    assert sorted(run.execution_id or "" for run in runs) == sorted(executions)
    assert Counter((r.task_index, r.model, r.test_mode, r.repeat) for r in runs).most_common(1)[0][1] == 1
    assert {e.status for e in executions.values()} == {"completed"}, Counter(e.status for e in executions.values())
    by_execution: dict[str, list[Event]] = {}
    for event in events:
        by_execution.setdefault(event.execution_id, []).append(event)
    for execution_id, own in by_execution.items():
        assert [e.seq for e in own] == list(range(1, len(own) + 1)), execution_id
        assert sum(e.type == EventType.EXECUTION_COMPLETED for e in own) == 1, execution_id
        calls = Counter(e.payload["toolCallId"] for e in own if e.type == EventType.TOOL_CALL)
        results = Counter(e.payload["toolCallId"] for e in own if e.type == EventType.TOOL_RESULT)
        assert calls and set(calls.values()) == {1} and calls == results, execution_id
    assert len(by_execution) == 28
    assert sorted(row.id for row in tool_rows) == sorted(
        e.payload["toolCallId"] for e in events if e.type == EventType.TOOL_CALL
    )
    assert all(row.status == "succeeded" for row in tool_rows), Counter(row.status for row in tool_rows)
    # Every with-verification run waited for the reviewer and was decided once, over the API; the others passed
    # their checkpoint on their own.
    waited = {e.id for e in executions.values() if e.test_mode == "with-verification"}
    assert len(waited) == 14
    by_hand = Counter(d.execution_id for d in decisions if d.via == "api")
    assert set(by_hand) == waited and set(by_hand.values()) == {1}, by_hand
    assert all(d.decision == "approve" and (d.via == "api") == (d.execution_id in waited) for d in decisions)
    assert set(reviewer.decided) <= waited
    # Never more than the limit in progress, and the limit was reached: the observer saw the scheduler at work.
    assert max(observer.samples) == LIMIT, Counter(observer.samples)
