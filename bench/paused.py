"""Paused executions: what 100,000 executions waiting at a checkpoint cost, and how they resume after a restart.

    .venv/bin/python -m bench.paused [--quick] [--backends sqlite,postgresql] [--count 100000]

1. The worker's RSS and the database's size are taken with the service idle (after its warm-up execution).
2. Executions are created through the API and paused by the worker at their checkpoint (500; 10 with --quick).
   The rest of the count is made of copies of those executions' rows (every table that holds rows of an
   execution, new ids throughout), bulk-inserted: the same rows the worker wrote, at a rate the API would
   need most of an hour for on this machine.
3. The worker's RSS and the database's size are taken again once its safety-net poll has run over them all:
   RSS growth, and database bytes per paused execution.
4. Everything is restarted (web and worker processes), then 1,000 of them (10 with --quick), drawn at random,
   are approved open loop; each latency runs from the decision POST's sending to the `created_at` of the
   worker's first event after the decision, as in bench/approve_resume.py.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import secrets
import time
from collections.abc import Callable, Sequence
from typing import Any

import sqlalchemy as sa

from bench.approve_resume import approve_and_observe, checkpoints_of
from bench.common import (
    PAUSING_TASK,
    Stack,
    backends_of,
    common_arguments,
    create_executions,
    stack,
    wait_for_status,
)
from bench.processes import rss_bytes
from bench.report import figure, note, percentile, spread
from core.ids import new_id
from core.models import Base, Execution

Row = dict[str, Any]


async def database_bytes(st: Stack) -> int:
    async with st.db.reading() as session:
        if st.db.dialect == "sqlite":
            pages = await session.scalar(sa.text("PRAGMA page_count"))
            free = await session.scalar(sa.text("PRAGMA freelist_count"))
            size = await session.scalar(sa.text("PRAGMA page_size"))
            return int((pages - free) * size)
        return int(await session.scalar(sa.text("SELECT pg_database_size(current_database())")))


def execution_tables() -> list[sa.Table]:
    """Every table holding rows of an execution, parents first."""
    return [t for t in Base.metadata.sorted_tables if t.name == "executions" or "execution_id" in t.c]


def _renderer(value: Any, old_ids: Sequence[str]) -> Callable[[dict[str, str]], Any]:
    """How to copy one value: as is, or with the template's ids swapped for the copy's."""
    is_json = isinstance(value, dict | list)
    text = json.dumps(value) if is_json else value
    if not isinstance(text, str) or not any(old in text for old in old_ids):
        return lambda _ids: value

    def render(ids: dict[str, str]) -> Any:
        out = text
        for old in old_ids:
            if old in out:
                out = out.replace(old, ids[old])
        return json.loads(out) if is_json else out

    return render


class Template:
    """One real paused execution's rows, ready to be copied under fresh ids."""

    def __init__(self, rows: dict[str, list[Row]], tables: dict[str, sa.Table]) -> None:
        self.old_ids: list[str] = []
        for name, table_rows in rows.items():
            (pk,) = tables[name].primary_key.columns if len(tables[name].primary_key.columns) == 1 else (None,)
            if pk is not None and isinstance(pk.type, sa.String):
                self.old_ids += [row[pk.name] for row in table_rows]
        self.plan: dict[str, list[dict[str, Callable[[dict[str, str]], Any]]]] = {}
        for name, table_rows in rows.items():
            table = tables[name]
            drop = {
                c.name
                for c in table.primary_key.columns
                if c.autoincrement is True and not isinstance(c.type, sa.String)
            }
            self.plan[name] = [
                {col: _renderer(value, self.old_ids) for col, value in row.items() if col not in drop}
                for row in table_rows
            ]

    def copy(self) -> dict[str, list[Row]]:
        ids = {old: new_id(old.split("_", 1)[0]) for old in self.old_ids}
        out: dict[str, list[Row]] = {}
        for name, rows in self.plan.items():
            copied = []
            for row in rows:
                values = {col: render(ids) for col, render in row.items()}
                if "token_digest" in values:
                    values["token_digest"] = secrets.token_hex(32)
                copied.append(values)
            out[name] = copied
        return out


async def clone(st: Stack, template_ids: Sequence[str], total: int, batch: int = 500) -> None:
    tables = {t.name: t for t in execution_tables()}
    templates = []
    async with st.db.reading() as session:
        for execution_id in template_ids:
            found: dict[str, list[Row]] = {}
            for name, table in tables.items():
                column = table.c.id if name == "executions" else table.c.execution_id
                found[name] = [
                    dict(r._mapping) for r in await session.execute(sa.select(table).where(column == execution_id))
                ]
            templates.append(Template(found, tables))
    made = 0
    while made < total:
        size = min(batch, total - made)
        merged: dict[str, list[Row]] = {name: [] for name in tables}
        for i in range(size):
            for name, rows in templates[(made + i) % len(templates)].copy().items():
                merged[name] += rows
        async with st.db.transaction() as session:
            for name, rows in merged.items():
                if rows:
                    await session.execute(tables[name].insert(), rows)
        made += size


async def measure(st: Stack, quick: bool, count: int | None = None) -> None:
    total = count or (100 if quick else 100_000)
    real = min(total, 10 if quick else 500)
    approvals = min(total, 10 if quick else 1000)
    rate = 10.0
    rss_idle, bytes_idle = rss_bytes(st.worker_pid), await database_bytes(st)

    started = time.monotonic()
    ids = await create_executions(st, real, PAUSING_TASK)
    await wait_for_status(st, ids, "awaiting_review")
    api_seconds = time.monotonic() - started
    started = time.monotonic()
    await clone(st, ids, total - real)
    clone_seconds = time.monotonic() - started
    async with st.db.reading() as session:
        paused = await session.scalar(
            sa.select(sa.func.count()).select_from(Execution).where(Execution.status == "awaiting_review")
        )
    if (paused or 0) < total:
        raise SystemExit(f"only {paused} executions are paused, wanted {total}")
    poll = float(st.env.get("VOUCH_WORKER_POLL_SECONDS", "5"))
    await asyncio.sleep(1.0 if quick else poll + 1.0)  # the beat's look (core/looks.py) has passed over them all
    rss_paused, bytes_paused = rss_bytes(st.worker_pid), await database_bytes(st)

    await st.restart()
    rss_restarted = rss_bytes(st.worker_pid)
    async with st.db.reading() as session:
        waiting = list(await session.scalars(sa.select(Execution.id).where(Execution.status == "awaiting_review")))
    chosen = random.sample(waiting, approvals)
    targets = await checkpoints_of(st, chosen)
    seen = await approve_and_observe(st, targets, rate)
    latencies, answered = seen.resumed, seen.answered

    growth_mb = (rss_paused - rss_idle) / 2**20
    per_execution = (bytes_paused - bytes_idle) / total
    p99 = percentile(latencies, 0.99)
    figure(
        "paused-executions",
        st.backend,
        f"{total:,} paused | worker RSS {rss_idle / 2**20:.1f} -> {rss_paused / 2**20:.1f} MB (+{growth_mb:.1f} MB), "
        f"{rss_restarted / 2**20:.1f} MB after restart | database {per_execution:,.0f} bytes per execution | "
        f"resume after restart {spread(latencies)} | decision POST answered {spread(answered)} | open loop {rate:g}/s",
        "RSS +<= 10 MB, <= 10 KB each, resume p99 <= 100 ms",
        growth_mb <= 10 and per_execution <= 10 * 1024 and p99 <= 100,
    )
    note(seen.cpu)
    note(
        f"{real} created through the API and paused by the worker in {api_seconds:.1f} s; "
        f"{total - real:,} copies of their rows inserted in {clone_seconds:.1f} s"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    common_arguments(parser)
    parser.add_argument("--count", type=int, help="paused executions (default 100,000; 100 with --quick)")
    args = parser.parse_args()

    async def run() -> None:
        for backend in backends_of(args):
            async with stack(backend) as st:
                await measure(st, args.quick, args.count)

    asyncio.run(run())


if __name__ == "__main__":
    main()
