"""Starting a suite's planned runs within its key's concurrency limit (issue 23, item 3).

A suite's runs are rows from the start (`suite_runs`, state `pending`). A run starts by the transaction that
creates its execution under the same slot condition as a create request (agents/creating.py, api/concurrency.py:
the key's other executions count too) and moves the run to `started` with a conditional UPDATE; both commit
together or not at all. So a run starts at most once, however many processes try: on PostgreSQL the pending row
is locked by the claim (FOR UPDATE SKIP LOCKED, a second scheduler takes the next one), on SQLite the write
transaction holds the database; and the `state = 'pending'` condition refuses what either let through.

Who starts them: the create request starts what fits at once; after that every worker's scheduler loop does,
woken when a suite's execution ends (its final event publishes on SUITE_CHANNEL, core/webhooks.py) and polling
as the safety net. Pending runs wait in the database, so nothing is lost when any process restarts.
"""

from __future__ import annotations

import asyncio
import logging

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncSession

from agents.creating import NewTask, insert_execution
from core.backends import backend_of
from core.bus import SUITE_CHANNEL
from core.db import Database, more_to_write
from core.looks import Looks
from core.models import SUITE_RUNS, SUITE_TASKS, SUITES, utcnow
from core.settings import Settings
from core.woken_loop import run_woken

log = logging.getLogger(__name__)

_R, _S = SUITE_RUNS.c, SUITES.c


class RunTaken(Exception):
    """A pending run this transaction chose was started or cancelled by another meanwhile: nothing commits."""


# The key's oldest pending run (oldest suite first, then the suite's own order). Suite ids sort by creation.
_NEXT = (
    sa.select(
        _R.id,
        _R.suite_id,
        _R.task_index,
        _R.model,
        _R.test_mode,
        sa.select(_S.user_id).where(_S.id == _R.suite_id).scalar_subquery().label("user_id"),
    )
    .where(
        _R.state == "pending",
        _R.suite_id.in_(sa.select(_S.id).where(_S.api_key_id == sa.bindparam("key_id"), _S.cancelled_at.is_(None))),
    )
    .order_by(_R.suite_id, _R.position)
    .limit(1)
)
_BODY = sa.select(SUITE_TASKS.c.body).where(
    SUITE_TASKS.c.suite_id == sa.bindparam("suite_id"), SUITE_TASKS.c.task_index == sa.bindparam("task_index")
)
_MARK_STARTED = (
    sa.update(SUITE_RUNS)
    .where(_R.id == sa.bindparam("run_id"), _R.state == "pending")
    .values(state="started", execution_id=sa.bindparam("execution_id"), started_at=sa.bindparam("now"))
)
# Keys with pending runs of suites that are not cancelled (a suite of a deleted key has none to count by: its runs
# wait, and cancelling it ends them).
_KEYS_WAITING = (
    sa.select(_S.api_key_id)
    .distinct()
    .where(
        _S.api_key_id.is_not(None),
        _S.cancelled_at.is_(None),
        sa.exists().where(_R.suite_id == _S.id, _R.state == "pending"),
    )
)


async def start_pending_runs(session: AsyncSession, key_id: str, limit: int) -> list[str]:
    """Start the key's pending suite runs, oldest first, while the key has fewer than `limit` executions in
    progress; the new executions' ids. In the caller's write transaction, which must commit for them to count."""
    more_to_write(session)
    backend = backend_of(session)
    next_run = backend.skip_locked(_NEXT)  # locks the suite_runs row only: the rest are subqueries
    started: list[str] = []
    while True:
        run = (await session.execute(next_run, {"key_id": key_id})).first()
        if run is None:
            return started
        body = await session.scalar(_BODY, {"suite_id": run.suite_id, "task_index": run.task_index})
        assert body is not None  # written with the suite, deleted only with it
        created = await insert_execution(
            session,
            run.user_id,
            key_id,
            NewTask.from_body(body, test_mode=run.test_mode),
            run.model,
            concurrency_limit=limit,
            suite_id=run.suite_id,
        )
        if created is None:
            return started  # no free slot: the rest wait for one
        moved = await session.execute(_MARK_STARTED, {"run_id": run.id, "execution_id": created.id, "now": utcnow()})
        if moved.rowcount != 1:  # type: ignore[attr-defined]
            raise RunTaken(run.id)
        started.append(created.id)


async def schedule_suites(db: Database, settings: Settings) -> int:
    """Start what fits of every key's pending suite runs; how many started."""
    async with db.reading() as session:
        keys = list(await session.scalars(_KEYS_WAITING))
    count = 0
    for key_id in keys:
        try:
            async with db.transaction() as session:
                await db.backend.begin_writing(session)
                count += len(await start_pending_runs(session, key_id, settings.concurrency_limit))
        except RunTaken:
            log.info("a suite run was started or cancelled meanwhile; looking again at the next wake-up")
    return count


async def run_suite_scheduler(db: Database, settings: Settings, looks: Looks, stop: asyncio.Event) -> None:
    """The worker's suite loop: woken when a suite's run ends, the beat's look as the safety net."""
    await run_woken(
        db,
        SUITE_CHANNEL,
        lambda: schedule_suites(db, settings),
        stop,
        looks=looks,
        look="suites",
        due=_KEYS_WAITING,
        name="the worker's suite wake-ups",
        failure="starting suite runs failed; retrying at the next wake-up",
    )
