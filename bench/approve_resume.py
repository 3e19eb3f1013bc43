"""Approve -> the agent's next step: a decision POSTed to the web process, the resume observed in the worker.

    .venv/bin/python -m bench.approve_resume [--quick] [--backends sqlite,postgresql]

N executions are created and paused at a checkpoint before their one step. Then one decision per execution
is POSTed open loop (at a fixed rate, never waiting for an answer before the next send). The latency of each
is from the moment its POST was sent to the `created_at` of the first event the worker writes after the
decision (`execution.resumed` today): the worker has been woken, has claimed the execution and is running the
agent again. Both moments are this machine's wall clock, taken in different processes. The decision POST's own
answer time (the "acknowledge") is printed beside it.

A second line, `approve-resumed-step`, times the same POSTs to the `created_at` of the resumed step's record: the
first `tool.result` after the decision (the gated write_file step done), which is what the peers of
`../shared/peers/` are timed to (`python -m bench --peers`), with the CPU each approval cost, all processes.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

import sqlalchemy as sa

from bench.common import PAUSING_TASK, Stack, create_executions, main_of, wait_for_event, wait_for_status
from bench.load import open_loop
from bench.report import figure, note, percentile, spread
from core.models import Checkpoint

GOAL_MS = {"sqlite": 50.0, "postgresql": 100.0}


async def checkpoints_of(st: Stack, ids: Sequence[str]) -> list[tuple[str, str]]:
    pairs: list[tuple[str, str]] = []
    async with st.db.reading() as session:
        for chunk in range(0, len(ids), 500):
            rows = await session.execute(
                sa.select(Checkpoint.execution_id, Checkpoint.id).where(
                    Checkpoint.execution_id.in_(list(ids)[chunk : chunk + 500]), Checkpoint.status == "awaiting_review"
                )
            )
            pairs.extend((e, c) for e, c in rows)
    return pairs


@dataclass
class Approvals:
    resumed: list[float]  # POST sent -> the worker's first event after the decision, ms
    step: list[float]  # POST sent -> the resumed step's record (the first tool.result after the decision), ms
    answered: list[float]  # the decision POST's answer time, ms
    cpu: str  # a line on the CPU each approval cost
    cpu_total_ms: float  # CPU per approval, every process of the service together


async def approve_and_observe(st: Stack, targets: Sequence[tuple[str, str]], rate: float) -> Approvals:
    """Approve each (execution, checkpoint) open loop at `rate`/s and see each resume and its step."""
    sent: dict[str, float] = {}
    answered: list[float] = []
    failures: list[str] = []
    async with st.client() as client:
        # The connection is opened before the first decision, as the peers' scripts open theirs (a GET /healthz):
        # the first approval is not also timed to a TCP handshake.
        async with client.get(f"{st.base}/healthz") as warm:
            await warm.read()
        cpu_before = st.cpu()

        async def send(i: int) -> None:
            execution_id, checkpoint_id = targets[i]
            url = f"{st.base}/api/eval/executions/{execution_id}/checkpoints/{checkpoint_id}/decision"
            sent[execution_id] = time.time()
            async with client.post(url, json={"decision": "approve", "comment": "bench"}) as answer:
                await answer.read()
                answered.append((time.time() - sent[execution_id]) * 1000)
                if answer.status != 200:
                    failures.append(f"{answer.status} {await answer.text()}")

        await open_loop(len(targets), rate, send)
    if failures:
        raise SystemExit(f"{len(failures)} decisions failed, e.g. {failures[0]}")
    ids = [e for e, _ in targets]
    decided_seq: dict[str, int] = {}

    def after(execution_id: str) -> int:
        return decided_seq.get(execution_id, 10**9)

    # Find each decision's event, then wait for the worker's first event after it.
    events = await wait_for_event(st, ids, lambda _: 0)
    for execution_id in ids:
        decided_seq[execution_id] = max(s for s, t, *_ in events[execution_id] if t == "checkpoint.decided")
    await wait_for_status(st, ids, "completed")
    events = await wait_for_event(st, ids, after)
    latencies, steps = [], []
    for execution_id in ids:
        later = [(s, t, at) for s, t, at, _p in events[execution_id] if s > decided_seq[execution_id]]
        latencies.append((min(later)[2].timestamp() - sent[execution_id]) * 1000)
        step_at = min(at for _s, t, at in later if t == "tool.result")
        steps.append((step_at.timestamp() - sent[execution_id]) * 1000)
    web, worker = (after - before for after, before in zip(st.cpu(), cpu_before, strict=True))
    if st.worker is None:
        cpu = f"CPU per approval (decision POST + the rest of the run), one process: {web / len(ids) * 1000:.1f} ms"
    else:
        cpu = (
            f"CPU per approval: web {web / len(ids) * 1000:.1f} ms (decision POST), "
            f"worker {worker / len(ids) * 1000:.1f} ms (resume and run to completion: 1 step)"
        )
    total = web + (worker if st.worker is not None else 0)
    return Approvals(latencies, steps, answered, cpu, total / len(ids) * 1000)


async def measure(st: Stack, quick: bool) -> None:
    count, rate = (10, 10.0) if quick else (300, 10.0)
    ids = await create_executions(st, count, PAUSING_TASK)
    await wait_for_status(st, ids, "awaiting_review")
    targets = await checkpoints_of(st, ids)
    seen = await approve_and_observe(st, targets, rate)
    goal = GOAL_MS[st.backend]
    figure(
        "approve-next-step",
        st.backend,
        f"{spread(seen.resumed)} | decision POST answered {spread(seen.answered)} | open loop {rate:g}/s",
        f"p99 <= {goal:g} ms",
        percentile(seen.resumed, 0.99) <= goal,
    )
    note("latency: decision POST sent -> created_at of the worker's first event after the decision (execution.resumed)")
    note(seen.cpu)
    figure(
        "approve-resumed-step",
        st.backend,
        f"{spread(seen.step)} | CPU per approval, all processes {seen.cpu_total_ms:.1f} ms | open loop {rate:g}/s",
    )
    note("latency: decision POST sent -> created_at of the resumed step's record (its tool.result)")


if __name__ == "__main__":
    main_of(measure, __doc__.split("\n\n")[0])
