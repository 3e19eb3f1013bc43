"""Suite summary: GET /api/eval/suites/<id> of a suite of 1,000 finished runs (issue 23, item 7).

    .venv/bin/python -m bench.suite_summary [--quick] [--backends sqlite,postgresql]

The runs are written straight into the database (a suite, its task, 1,000 runs each with a completed execution,
a checkpoint decided after a review wait, two model requests, a tool call and its result, a verdict), as a
finished suite would have left them; then one connection asks for the suite's record again and again (closed
loop) and the latency of each answer is taken. The record is computed on every request (core/suite_summary.py).
Then its runs are listed, page by page (GET /runs), and counted. The tables are not ANALYZEd after the fill:
PostgreSQL plans as it would for a suite newer than its statistics.
"""

from __future__ import annotations

import time
from datetime import timedelta
from typing import Any

import sqlalchemy as sa

from bench.common import Stack, main_of
from bench.report import figure, note, percentile, spread
from core.ids import new_id
from core.models import CHECKPOINTS, DECISIONS, EVENTS, EXECUTIONS, SUITE_RUNS, SUITE_TASKS, SUITES, utcnow

MODELS = ("offline", "openai:gpt-4o-mini")
GOAL_MS = 200.0


async def fill_suite(st: Stack, runs: int) -> str:
    """A finished suite of `runs` runs, half per model; its id."""
    suite_id, now = new_id("ste"), utcnow()
    start = now - timedelta(hours=2)
    body = {"taskName": "Digest", "taskDescription": "Write a note.", "testMode": "with-verification"}
    executions: list[dict[str, Any]] = []
    suite_runs: list[dict[str, Any]] = []
    checkpoints: list[dict[str, Any]] = []
    decisions: list[dict[str, Any]] = []
    events: list[dict[str, Any]] = []
    for position in range(runs):
        execution_id, checkpoint_id = new_id("exe"), new_id("chk")
        model = MODELS[position % len(MODELS)]
        paused = start + timedelta(seconds=position)
        decided = paused + timedelta(milliseconds=100 + position * 7 % 5000)
        executions.append(
            dict(
                id=execution_id,
                user_id=st.user_id,
                task_name="Digest",
                task_description="Write a note.",
                test_mode="with-verification",
                agent_model=model,
                status="completed" if position % 10 else "failed",
                created_at=start,
                started_at=start,
                completed_at=decided + timedelta(seconds=1),
                last_seq=9,
                lease_epoch=1,
                verdict_state="done",
                verdict_passed=position % 3 != 0,
                verdict_score=1.0,
                suite_id=suite_id,
                reads_comments=True,
                max_revisions=3,
                on_deadline="reject",
                auto_detect_checkpoints=False,
            )
        )
        suite_runs.append(
            dict(
                id=new_id("srn"),
                suite_id=suite_id,
                position=position,
                task_index=0,
                model=model,
                test_mode="with-verification",
                repeat=position // len(MODELS) + 1,
                state="started",
                execution_id=execution_id,
                started_at=start,
            )
        )
        checkpoints.append(
            dict(
                id=checkpoint_id,
                execution_id=execution_id,
                position=0,
                stage="Write",
                description="",
                verification_question="Write it?",
                origin="caller",
                status="approved",
                attempt=1,
                awaiting_since=paused,
            )
        )
        decisions.append(
            dict(
                id=new_id("dec"),
                checkpoint_id=checkpoint_id,
                attempt=1,
                execution_id=execution_id,
                decision="reject" if position % 7 == 0 else "approve",
                decided_by="r@example.com",
                via="api",
                comment="",
                decided_at=decided,
            )
        )
        usage = {"durationMs": 250.5 + position % 17, "inputTokens": 400, "outputTokens": 60, "costUsd": 0.0004}
        for seq, (kind, payload, at) in enumerate(
            [
                ("execution.created", {"taskName": "Digest"}, start),
                ("execution.started", {"worker": "bench"}, start),
                ("model.request", usage, start),
                ("tool.call", {"tool": "write_note"}, start),
                ("tool.result", {"tool": "write_note", "durationMs": 3.25}, start),
                ("checkpoint.awaiting_review", {"checkpointId": checkpoint_id, "attempt": 1}, paused),
                ("checkpoint.decided", {"checkpointId": checkpoint_id, "attempt": 1}, decided),
                ("model.request", usage, decided),
                ("execution.completed", {"status": "completed"}, decided),
            ],
            start=1,
        ):
            events.append(dict(execution_id=execution_id, seq=seq, type=kind, payload=payload, created_at=at))
    async with st.db.transaction() as session:
        await session.execute(
            sa.insert(SUITES),
            [
                dict(
                    id=suite_id,
                    user_id=st.user_id,
                    api_key_id=None,
                    name="bench",
                    test_mode="with-verification",
                    repeats=runs // len(MODELS),
                    models=list(MODELS),
                    created_at=start,
                )
            ],
        )
        await session.execute(
            sa.insert(SUITE_TASKS), [dict(suite_id=suite_id, task_index=0, task_name="Digest", body=body)]
        )
        for table, rows in (
            (EXECUTIONS, executions),
            (SUITE_RUNS, suite_runs),
            (CHECKPOINTS, checkpoints),
            (DECISIONS, decisions),
            (EVENTS, events),
        ):
            for first in range(0, len(rows), 500):
                await session.execute(sa.insert(table), rows[first : first + 500])
    return suite_id


async def measure(st: Stack, quick: bool) -> None:
    runs, requests = (20, 10) if quick else (1000, 300)
    suite_id = await fill_suite(st, runs)
    url = f"{st.base}/api/eval/suites/{suite_id}"
    latencies: list[float] = []
    async with st.client(1) as client:
        for index in range(requests + 5):
            began = time.perf_counter()
            async with client.get(url) as answer:
                record = await answer.json()
                if answer.status != 200:
                    raise SystemExit(f"GET {url} answered {answer.status}: {record}")
            if index >= 5:  # the first few warm the connection and the statement caches
                latencies.append((time.perf_counter() - began) * 1000)
    if record["progress"]["finished"] != runs or sum(group["finished"] for group in record["byModel"]) != runs:
        raise SystemExit(f"the suite's record does not show {runs} finished runs: {record['progress']}")
    # The runs themselves, a page of 500 at a time (GET /runs): every one, once.
    listed: list[str] = []
    page_latencies: list[float] = []
    cursor = None
    async with st.client(1) as client:
        while True:
            began = time.perf_counter()
            params = {"limit": "500", **({"cursor": cursor} if cursor else {})}
            async with client.get(f"{url}/runs", params=params) as answer:
                page = await answer.json()
            page_latencies.append((time.perf_counter() - began) * 1000)
            listed.extend(run["executionId"] for run in page["runs"])
            cursor = page["nextCursor"]
            if cursor is None:
                break
    if len(set(listed)) != runs or len(listed) != runs:
        raise SystemExit(f"GET {url}/runs listed {len(listed)} runs ({len(set(listed))} distinct), not {runs}")
    p99 = percentile(latencies, 0.99)
    figure(
        "suite-summary",
        st.backend,
        f"GET a suite of {runs} finished runs: {spread(latencies)}",
        f"p99 <= {GOAL_MS:g} ms",
        None if quick else p99 <= GOAL_MS,
    )
    note(f"closed loop, one connection, {requests} requests; answer {len(str(record)):,} characters")
    note(f"its runs: {len(page_latencies)} pages of up to 500 from GET /runs, {spread(page_latencies)}")


if __name__ == "__main__":
    main_of(measure, __doc__.split("\n\n")[0])
