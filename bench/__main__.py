"""Run every benchmark: `.venv/bin/python -m bench [--quick] [--backends sqlite,postgresql] [--only NAME,…]`.

`.venv/bin/python -m bench --peers [--quick] [--backends …] [--rounds N] [--parts approve,fanout]` runs them beside
the peers of ../shared/peers, alternating, and prints each ratio (bench/peers.py).

One stack per backend serves every figure in turn (the paused-executions figure last: it restarts the stack and
leaves 100,000 executions behind). Each figure prints a `FIGURE <name> [<backend>] …` line; see bench/README.md.
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time
from datetime import UTC, datetime

from bench import (
    approve_cpu,
    approve_resume,
    chat_fanout,
    create_first_step,
    durable_step,
    external,
    idle,
    paused,
    status_throughput,
    suite_summary,
)
from bench.common import Measure, backends_of, common_arguments, run_until_stopped, stack
from bench.steal import Steal

FIGURES: dict[str, Measure] = {
    "durable-step-overhead": durable_step.measure,
    "create-first-step": create_first_step.measure,
    "approve-next-step": approve_resume.measure,
    "approve-one-at-a-time": approve_cpu.measure,
    "status-throughput": status_throughput.measure,
    # Before the fan-outs: python-engineio leaves each socket's ping task asleep for its ping interval (25 s) after
    # the socket closed, and the 2,200 of a fan-out woke one by one through an idle window measured after it.
    "idle-processes": idle.measure,
    "chat-fanout": chat_fanout.measure,
    "decision-long-poll": external.measure_long_poll,
    "external-events-chat": external.measure_events,
    "chat-fanout-uncompressed": chat_fanout.measure_uncompressed,
    "paused-executions": paused.measure,
    "suite-summary": suite_summary.measure,
}


def machine() -> str:
    with open("/proc/meminfo") as info:
        total_kb = int(info.readline().split()[1])
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    return (
        f"{os.cpu_count()} cores, {total_kb / 2**20:.0f} GB RAM, {platform.python_implementation()} "
        f"{platform.python_version()}, load average {load}"
    )


def main() -> None:
    if "--peers" in sys.argv[1:]:
        # Beside the peers of ../shared/peers, alternating, with ratios (bench/peers.py).
        from bench import peers

        peers.main(sys.argv[1:])
        return
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    common_arguments(parser)
    parser.add_argument("--only", help=f"comma-separated figures, of: {', '.join(FIGURES)}")
    args = parser.parse_args()
    chosen = [f.strip() for f in args.only.split(",")] if args.only else list(FIGURES)
    unknown = set(chosen) - set(FIGURES)
    if unknown:
        raise SystemExit(f"--only: unknown {sorted(unknown)}")
    print(f"vouch bench {'--quick ' if args.quick else ''}{datetime.now(UTC):%Y-%m-%d %H:%M} UTC on {machine()}")

    async def run() -> None:
        for backend in backends_of(args):
            started, steal = time.monotonic(), Steal()
            async with stack(backend) as st:
                for name in chosen:
                    await FIGURES[name](st, args.quick)
            took, stolen = time.monotonic() - started, steal.since_last()
            print(f"[{backend}] done in {took:.0f} s; CPU stolen by the host meanwhile: {stolen}", flush=True)

    run_until_stopped(run())
    print(f"finished; load average now {', '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
