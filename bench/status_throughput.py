"""Status throughput: GET /api/eval/status/<id> (API key auth, rate limiting, the status record from the
database) against a bare Quart JSON route served by the same web process, in the same run.

    .venv/bin/python -m bench.status_throughput [--quick] [--backends sqlite,postgresql]

Throughput is a capacity figure, so this load is closed loop: C connections each send their next request as soon
as the last is answered, for a fixed time. The two routes take turns (bare, status, bare, status, …) so that the
machine's other load falls on both alike; requests/s are summed over each route's turns. The latency printed is
under that saturating load. The rate limit is on (its check runs on every request, through Redis on the
PostgreSQL stack) with a quota the load never reaches. The client runs in this process and shares the cores.
"""

from __future__ import annotations

import asyncio
import time

import aiohttp

from bench.common import PAUSING_TASK, Stack, create_executions, main_of, wait_for_status
from bench.report import figure, note, spread

CONNECTIONS = 16


async def hammer(client: aiohttp.ClientSession, url: str, seconds: float) -> tuple[int, list[float]]:
    latencies: list[float] = []
    errors: list[int] = []
    loop = asyncio.get_running_loop()
    end = loop.time() + seconds

    async def connection() -> None:
        while loop.time() < end:
            start = time.perf_counter()
            async with client.get(url) as answer:
                await answer.read()
                if answer.status != 200:
                    errors.append(answer.status)
            latencies.append((time.perf_counter() - start) * 1000)

    await asyncio.gather(*(connection() for _ in range(CONNECTIONS)))
    if errors:
        raise SystemExit(f"{len(errors)} requests to {url} failed, e.g. {errors[0]}")
    return len(latencies), latencies


async def measure(st: Stack, quick: bool) -> None:
    rounds, seconds = (1, 0.5) if quick else (4, 8.0)
    (execution_id,) = await create_executions(st, 1, PAUSING_TASK)
    await wait_for_status(st, [execution_id], "awaiting_review")  # a record with a checkpoint and events
    urls = {"bare": f"{st.base}/bench/bare", "status": f"{st.base}/api/eval/status/{execution_id}"}
    done = {"bare": 0, "status": 0}
    latencies: dict[str, list[float]] = {"bare": [], "status": []}
    async with st.client(CONNECTIONS) as client:
        for url in urls.values():  # warm both
            await hammer(client, url, 0.3)
        for _ in range(rounds):
            for name, url in urls.items():
                count, times = await hammer(client, url, seconds)
                done[name] += count
                latencies[name] += times
    rate = {name: done[name] / (rounds * seconds) for name in done}
    ratio = rate["status"] / rate["bare"]
    figure(
        "status-throughput",
        st.backend,
        f"status {rate['status']:,.0f} req/s, bare route {rate['bare']:,.0f} req/s, ratio {ratio:.0%} "
        f"| status latency {spread(latencies['status'])} | bare latency {spread(latencies['bare'])}",
        ">= 60% of the bare route",
        ratio >= 0.6,
    )
    note(f"closed loop, {CONNECTIONS} connections, {rounds} x {seconds:g} s per route, turns alternating")


if __name__ == "__main__":
    main_of(measure, __doc__.split("\n\n")[0])
