"""Create -> the agent's first step: from a create POST's sending to the worker's first event.

    .venv/bin/python -m bench.create_first_step [--quick] [--backends sqlite,postgresql]

Creates are sent open loop at a fixed rate (never waiting for an answer before the next send). Each latency
runs from the moment the POST's bytes were written to the socket (`WirePoster`: it arrives over loopback within
tens of microseconds) to the `created_at` of the first event the worker writes (`execution.started`, written
by the claim). The task has one step and no checkpoint, so executions finish and the worker stays unsaturated.
The create POST's answer time is printed beside it, and the share of the latency spent before the answer.
"""

from __future__ import annotations

import time

from bench.common import Stack, main_of, wait_for_event, wait_for_status
from bench.load import WirePoster, open_loop
from bench.report import figure, note, percentile, spread

TASK = {"taskName": "bench", "taskDescription": "Summarise.", "testMode": "without-verification"}


async def measure(st: Stack, quick: bool) -> None:
    count, rate = (10, 10.0) if quick else (300, 10.0)
    sent: dict[str, float] = {}
    answered: list[float] = []
    cpu_before = st.cpu()
    async with WirePoster(st, "/api/eval/create-task-agent") as poster:

        async def send(_: int) -> None:
            start, status, data = await poster.post(TASK)
            answered.append((time.time() - start) * 1000)
            if status != 201:
                raise SystemExit(f"create failed: {status} {data}")
            sent[data["executionId"]] = start

        await open_loop(count, rate, send)
    ids = list(sent)
    # seq 1 is the create's own `execution.created`; the worker writes from seq 2.
    events = await wait_for_event(st, ids, lambda _: 1)
    await wait_for_status(st, ids, "completed")
    web, worker = (after - before for after, before in zip(st.cpu(), cpu_before, strict=True))
    cpu = (
        f"one process {web / count * 1000:.1f} ms"
        if st.worker is None
        else f"web {web / count * 1000:.1f} ms (create POST), worker {worker / count * 1000:.1f} ms (run: 1 step)"
    )
    latencies = [(min(at for s, _t, at, _p in events[i] if s > 1).timestamp() - sent[i]) * 1000 for i in ids]
    p50, p99 = percentile(latencies, 0.5), percentile(latencies, 0.99)
    figure(
        "create-first-step",
        st.backend,
        f"{spread(latencies)} | create POST answered {spread(answered)} | open loop {rate:g}/s",
        "p50 <= 5 ms, p99 <= 25 ms",
        p50 <= 5 and p99 <= 25,
    )
    note("latency: create POST written to the socket -> created_at of the worker's first event (execution.started)")
    note(f"CPU per execution: {cpu}")


if __name__ == "__main__":
    main_of(measure, __doc__.split("\n\n")[0])
