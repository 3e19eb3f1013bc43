"""Approvals one at a time: the CPU each costs, process by process, with no idle time between them.

    .venv/bin/python -m bench.approve_cpu [--quick] [--backends sqlite,postgresql]

N executions are created and paused at a checkpoint before their one step; each is approved in turn, the next
POST sent as soon as the last is answered, and then every run is awaited to its end. Printed: the CPU each
approval cost the web process and the worker (the decision, then the resume and the run to its end), and the
wall time per approval.

`approve-next-step` paces its approvals at 10/s, as a reviewer's come; on a virtual machine every process then
wakes from idle for each one, with cold caches, which costs as much CPU again as the work itself (bench/README.md,
2026-11-29). Closed loop, that cost is gone: what is left is the work, and a change to it shows in alternating
pairs with less noise.
"""

from __future__ import annotations

import time

from bench.approve_resume import checkpoints_of
from bench.common import PAUSING_TASK, Stack, create_executions, main_of, wait_for_status
from bench.report import figure


async def measure(st: Stack, quick: bool) -> None:
    count = 10 if quick else 500
    ids = await create_executions(st, count, PAUSING_TASK)
    await wait_for_status(st, ids, "awaiting_review")
    targets = await checkpoints_of(st, ids)
    async with st.client() as client:
        async with client.get(f"{st.base}/healthz") as warm:
            await warm.read()
        cpu_before = st.cpu()
        started = time.monotonic()
        for execution_id, checkpoint_id in targets:
            url = f"{st.base}/api/eval/executions/{execution_id}/checkpoints/{checkpoint_id}/decision"
            async with client.post(url, json={"decision": "approve", "comment": "bench"}) as answer:
                # Read to its end, as a client does: aiohttp closes a connection whose answer was left unread, and
                # each approval would then also pay for a TCP connection.
                await answer.read()
                if answer.status != 200:
                    raise SystemExit(f"a decision failed: {answer.status} {await answer.text()}")
        wall = time.monotonic() - started
    await wait_for_status(st, ids, "completed")
    web, worker = (after - before for after, before in zip(st.cpu(), cpu_before, strict=True))
    per = 1000 / len(targets)
    if st.worker is None:
        cpu = f"CPU per approval, one process {web * per:.2f} ms"
    else:
        together = (web + worker) * per
        cpu = f"CPU per approval: web {web * per:.2f} ms, worker {worker * per:.2f} ms, together {together:.2f} ms"
    figure("approve-one-at-a-time", st.backend, f"n={len(targets)} {cpu} | wall {wall * per:.2f} ms per approval")


if __name__ == "__main__":
    main_of(measure, __doc__.split("\n\n")[0])
