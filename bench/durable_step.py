"""Durable step overhead: an offline agent step with persistence and publish, minus the same step in memory.

    .venv/bin/python -m bench.durable_step [--quick] [--backends sqlite,postgresql]

Durable: executions of K `write_file` steps run one at a time by the real worker (nothing else runs), so each
step is measured alone. A step's time is the distance between the `created_at` of consecutive `tool.result`
events of one execution: all the work of one step (its transactions with the fencing lease renewal, tool call
row, events, commits, publishing to the bus and chat) and nothing else. The first step of each execution is left
out (it also holds the claim and the plan).

In memory: the same steps of the same plan in this process with no database and no bus: the offline agent's
plan, step message, tool call and result payloads, the tool's perform, the state update and the events' JSON.
The overhead is the difference of the two medians; the ratio compares them.
"""

from __future__ import annotations

import itertools
import json
import time
from typing import Any

from agents.offline_plan import plan_task
from bench.common import Stack, create_executions, events_of, main_of, wait_for_status
from bench.report import figure, note, percentile, spread
from core.ids import new_id
from core.models import utcnow

GOAL_MS = {"sqlite": 1.0, "postgresql": 2.0}


def task(steps: int) -> dict[str, Any]:
    text = " ".join(f'Write a note called "n{i}.md" saying "step {i} of the bench".' for i in range(steps))
    return {"taskName": "bench", "taskDescription": text, "testMode": "without-verification"}


async def in_memory_steps(description: str, rounds: int) -> list[float]:
    """The agent's own work for each step, persisted nowhere: ms per step.

    Kept to the planner (agents/offline_plan.py) and plain data, so that it does not follow the runtime's
    internals as they change: the step's message, tool call and result payloads, the state update, the events'
    wire JSON. A `write_file` step's `perform` does nothing outside a transaction.
    """
    times: list[float] = []
    plan: list[dict[str, Any]] = [
        {"tool": s.tool, "args": s.args, "instruction": s.instruction} for s in plan_task(description).steps
    ]
    for _ in range(rounds):
        # The plan is held apart from the state each step saves (executions.agent_plan), as the runner holds it.
        state: dict[str, Any] = {"agent": "offline", "unrecognised": [], "gates": [], "cursor": 0}
        for cursor, step in enumerate(plan):
            start = time.perf_counter()
            call_id, started = new_id("call"), utcnow()
            message = {"text": f"Writing {step['args']['path']} to the workspace."}
            call = {"toolCallId": call_id, "tool": step["tool"], "args": step["args"], "actsOnWorld": False}
            result = {"path": step["args"]["path"], "bytes": len(str(step["args"]["content"]).encode())}
            state["cursor"] = cursor + 1
            snapshot = dict(state)
            duration = round((utcnow() - started).total_seconds() * 1000, 3)
            done = {"toolCallId": call_id, "tool": step["tool"], "result": result, "durationMs": duration}
            json.dumps([message, call, done, snapshot], separators=(",", ":"))
            times.append((time.perf_counter() - start) * 1000)
    return times


async def measure(st: Stack, quick: bool) -> None:
    steps, executions = (10, 2) if quick else (20, 15)
    body = task(steps)
    durable: list[float] = []
    for _ in range(executions):
        (execution_id,) = await create_executions(st, 1, body)
        await wait_for_status(st, [execution_id], "completed")
        results = [at for _s, t, at, _p in (await events_of(st, [execution_id]))[execution_id] if t == "tool.result"]
        if len(results) != steps:
            raise SystemExit(f"expected {steps} steps, the worker took {len(results)}")
        durable += [(b - a).total_seconds() * 1000 for a, b in itertools.pairwise(results)]
    memory = await in_memory_steps(body["taskDescription"], max(executions, 50))
    overhead = percentile(durable, 0.5) - percentile(memory, 0.5)
    goal = GOAL_MS[st.backend]
    figure(
        "durable-step-overhead",
        st.backend,
        f"overhead p50={overhead:.2f} ms | durable step {spread(durable)} | in memory {spread(memory, 'ms')} "
        f"| ratio durable/memory p50 {percentile(durable, 0.5) / percentile(memory, 0.5):,.0f}x",
        f"p50 <= {goal:g} ms",
        overhead <= goal,
    )
    note("durable: distance between consecutive tool.result events of one execution, worker running nothing else")


if __name__ == "__main__":
    main_of(measure, __doc__.split("\n\n")[0])
