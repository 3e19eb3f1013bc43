"""What each process of the service costs while nothing happens: CPU and wake-ups a second.

    .venv/bin/python -m bench.idle [--quick] [--backends sqlite,postgresql]

N executions are created and paused at a checkpoint (a reviewer's wait: the usual state of a run), then nothing is
asked of the service for a while. Printed for each process (the web process and the worker; one process when
embedded): the CPU it used a second, and how often its threads woke a second (voluntary context switches). A
self-hosted service is idle most of the time, and on a virtual machine each wake-up costs more than the work it
wakes for; what a process does on its own also lands, now and then, in the middle of an approval.
"""

from __future__ import annotations

import asyncio
import time

from bench.common import PAUSING_TASK, Stack, create_executions, main_of, wait_for_status
from bench.processes import cpu_and_wakeups
from bench.report import figure


async def measure(st: Stack, quick: bool) -> None:
    count, seconds = (10, 2.0) if quick else (300, 20.0)
    ids = await create_executions(st, count, PAUSING_TASK)
    await wait_for_status(st, ids, "awaiting_review")
    assert st.web is not None
    processes = {"web": st.web.pid} if st.worker is None else {"web": st.web.pid, "worker": st.worker_pid}
    before = {name: cpu_and_wakeups(pid) for name, pid in processes.items()}
    started = time.monotonic()
    await asyncio.sleep(seconds)  # the measured idle period itself
    elapsed = time.monotonic() - started
    after = {name: cpu_and_wakeups(pid) for name, pid in processes.items()}
    parts = [
        f"{name}: CPU {(after[name][0] - before[name][0]) / elapsed * 1000:.2f} ms/s, "
        f"wake-ups {(after[name][1] - before[name][1]) / elapsed:.1f}/s"
        for name in processes
    ]
    figure("idle-processes", st.backend, f"{count} executions paused, {elapsed:.0f} s | " + " | ".join(parts))


if __name__ == "__main__":
    main_of(measure, __doc__.split("\n\n")[0])
