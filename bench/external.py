"""Bring your own agent (issue 22): how fast an external agent hears a decision, and how its events reach a watcher.

    .venv/bin/python -m bench.external [--quick] [--backends sqlite,postgresql]

Two figures, on an external execution (`agentModel: "external"`) driven over REST as an agent drives it:

- `decision-long-poll`: N checkpoints, each awaited by the agent's long-poll `GET …/checkpoints/<id>?wait=60`
  started two seconds before its decision (each checkpoint read once with `wait=0` first, as a warm-up); the
  decisions are POSTed open loop at a fixed rate. Latency: from the moment the decision POST's bytes are written
  (bench.load.WirePoster) to the moment the long-poll's answer, carrying the decision, is read back here. On
  PostgreSQL + Redis the long-polls are held by a second web process (`bench.server` without a worker, as
  `vouch web`), the decisions go to the stack's, so the decision crosses processes through PostgreSQL and Redis;
  SQLite embedded is one process, so both go to it.
- `external-events-chat`: 1,000 events POSTed to `…/events` in batches of 50, each batch after the previous
  answered; one Socket.IO watcher of the execution's chat (bench.chat_fanout.Watcher) must receive every event
  in order with no gap. Latency per batch: from its POST's bytes written to the watcher's receipt of its last event
  (on PostgreSQL, POSTed to the second web process and watched on the stack's).

The load generator, the web processes, the worker, PostgreSQL and Redis share this machine's cores.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import aiohttp

from bench.chat_fanout import Watcher
from bench.common import EMAIL, Stack, main_of
from bench.load import WirePoster, open_loop
from bench.processes import web_answers, web_listener
from bench.report import figure, note, percentile, spread
from core.links import chat_view_token

GOAL_MS = 50.0
EXTERNAL_TASK: dict[str, Any] = {
    "taskName": "bench external",
    "taskDescription": "An agent of the caller's own asks before it acts.",
    "agentModel": "external",
    "assignedReviewer": EMAIL,
}


@asynccontextmanager
async def second_web(st: Stack) -> AsyncIterator[str]:
    """Another web process on the stack's database and Redis (`vouch web`'s app, no worker); yields its base URL.
    SQLite embedded has no second process to offer: the stack's own web process is yielded."""
    if st.worker is None:
        yield st.base
        return
    with web_listener() as listener:
        proc = st.spawn_web("web2", listener)
        base = f"http://127.0.0.1:{listener.getsockname()[1]}"
        try:
            await web_answers(base, (proc,), f"{st.work}/web2.log")
            yield base
        finally:
            proc.terminate()
            await asyncio.to_thread(proc.wait, 20)


async def _external_executions(st: Stack, count: int) -> list[str]:
    ids: list[str] = []
    async with st.client() as client:
        for _ in range(count):
            async with client.post(f"{st.base}/api/eval/create-task-agent", json=EXTERNAL_TASK) as answer:
                data = await answer.json()
                if answer.status != 201:
                    raise SystemExit(f"create failed: {answer.status} {data}")
                ids.append(data["executionId"])
    return ids


async def _checkpoint(client: aiohttp.ClientSession, base: str, execution_id: str) -> str:
    body = {"key": "send", "stage": "Send", "verificationQuestion": "Send it?",
            "nextAction": {"tool": "send_mail", "args": {"to": "team@example.com"}}}
    async with client.post(f"{base}/api/eval/executions/{execution_id}/checkpoints", json=body) as answer:
        data = await answer.json()
        if answer.status != 201:
            raise SystemExit(f"checkpoint failed: {answer.status} {data}")
        checkpoint_id: str = data["checkpointId"]
        return checkpoint_id


async def measure_long_poll(st: Stack, quick: bool) -> None:
    count, rate, lead = (10, 10.0, 2.0) if quick else (300, 10.0, 2.0)
    ids = await _external_executions(st, count)
    async with st.client() as client:
        checkpoints = [await _checkpoint(client, st.base, execution_id) for execution_id in ids]
    latencies: list[float] = []
    early: list[str] = []
    async with second_web(st) as poll_base, st.client() as client:
        for execution_id, checkpoint_id in zip(ids, checkpoints, strict=True):
            # Warm-up, not measured: the poller's key cache, connections and code paths, as in a process that serves.
            url = f"{poll_base}/api/eval/executions/{execution_id}/checkpoints/{checkpoint_id}"
            async with client.get(url, params={"wait": "0"}) as answer:
                if answer.status != 200:
                    raise SystemExit(f"long-poll answered {answer.status} {await answer.text()}")
        posters = [WirePoster(st, f"/api/eval/executions/{e}/checkpoints/{c}/decision", connections=1)
                   for e, c in zip(ids, checkpoints, strict=True)]
        loop = asyncio.get_running_loop()
        start = loop.time() + lead

        async def agent_and_reviewer(i: int) -> None:
            url = f"{poll_base}/api/eval/executions/{ids[i]}/checkpoints/{checkpoints[i]}"

            async def poll() -> float:
                async with client.get(url, params={"wait": "60"}) as answer:
                    data = await answer.json()
                    heard = time.time()
                if answer.status != 200 or data.get("decision") != "approve":
                    raise SystemExit(f"long-poll answered {answer.status} {data}")
                return heard

            async def decide() -> float:
                await asyncio.sleep(max(0.0, start + i / rate - loop.time()))
                async with posters[i] as poster:
                    sent, status, data = await poster.post({"decision": "approve", "comment": "bench"})
                if status != 200:
                    raise SystemExit(f"decision answered {status} {data}")
                return sent

            heard, sent = await asyncio.gather(poll(), decide())
            if heard < sent:
                early.append(ids[i])  # answered before its decision was sent: never the case if all is well
            latencies.append((heard - sent) * 1000)

        await open_loop(count, rate, agent_and_reviewer)
    if early:
        raise SystemExit(f"{len(early)} long-polls answered before their decision was sent")
    where = "another web process (PostgreSQL + Redis)" if st.worker is not None else "the same process (embedded)"
    figure(
        "decision-long-poll",
        st.backend,
        f"{spread(latencies)} | open loop {rate:g}/s, each long-poll held {lead:g} s before its decision",
        f"p99 <= {GOAL_MS:g} ms",
        percentile(latencies, 0.99) <= GOAL_MS,
    )
    note(f"latency: decision POST's bytes written -> the agent's long-poll answer read; long-poll held by {where}")


async def measure_events(st: Stack, quick: bool) -> None:
    total, batch = (100, 50) if quick else (1000, 50)
    (execution_id,) = await _external_executions(st, 1)
    token = chat_view_token(st.env["VOUCH_SECRET_KEY"].encode(), execution_id)
    watcher = Watcher()
    sent_at: list[tuple[int, float]] = []  # (the batch's last event's position, when its POST was written)
    async with second_web(st) as post_base, aiohttp.ClientSession() as session:
        await watcher.start(session, st.base, execution_id, token)
        port = int(post_base.rsplit(":", 1)[1])  # the events go to the second web process
        poster = WirePoster(st, f"/api/eval/executions/{execution_id}/events", connections=1, port=port)
        first_seq: int | None = None
        async with poster:
            for first in range(0, total, batch):
                events = [{"key": f"e{n}", "type": "message", "text": f"step {n} " + "x" * 120}
                          for n in range(first, first + batch)]
                sent, status, data = await poster.post({"events": events})
                if status != 200:
                    raise SystemExit(f"events answered {status} {data}")
                seqs = [event["seq"] for event in data["events"]]
                first_seq = seqs[0] if first_seq is None else first_seq
                sent_at.append((seqs[-1], sent))
        assert first_seq is not None
        last_seq = sent_at[-1][0]
        deadline = time.monotonic() + 60
        while not watcher.receipts or watcher.receipts[-1][0] < last_seq:
            if time.monotonic() > deadline:
                raise SystemExit(f"the watcher got {len(watcher.receipts)} events, the last {watcher.receipts[-1:]}")
            await asyncio.sleep(0.02)  # a benchmark's progress check, not synchronisation of a test
        await watcher.close()
    seqs = [seq for seq, _ in watcher.receipts if seq >= first_seq]
    in_order = seqs == list(range(first_seq, last_seq + 1))
    # The watcher's receipts are on CLOCK_MONOTONIC, the POSTs' stamps on time.time(): both taken here.
    offset = time.time() - time.monotonic()
    received = {seq: at + offset for seq, at in watcher.receipts}
    latencies = [(received[seq] - sent) * 1000 for seq, sent in sent_at]
    seconds = received[last_seq] - sent_at[0][1] if sent_at else 0.0
    figure(
        "external-events-chat",
        st.backend,
        f"{len(seqs)} of {total} events in order, no gap: {'yes' if in_order else 'NO'} | {total / seconds:,.0f} "
        f"events/s | per batch of {batch}, POST -> last event received {spread(latencies)}",
        "every event, in order, no gap",
        in_order and len(seqs) == total,
    )
    where = "posted to another web process, watched on the stack's" if st.worker is not None else "one process"
    note(f"{total // batch} POSTs of {batch} events, each after the previous answered; {where}")


async def measure(st: Stack, quick: bool) -> None:
    await measure_long_poll(st, quick)
    await measure_events(st, quick)


if __name__ == "__main__":
    main_of(measure, __doc__.split("\n\n")[0])
