"""An approval over the API where the database commits statements by themselves (PostgreSQL): one statement that
locks the checkpoint and its execution together, waits for no lock, and leaves the rest to the transactional path
(review.decide in a session alone). What must hold whichever way a decision is taken: a checkpoint is approved only
with its decision row and event, and a decision never deadlocks with one taken in a transaction."""

from __future__ import annotations

import asyncio
from typing import Any

import asyncpg
import pytest
import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy.engine import Connection

from core._sqlalchemy_shortcuts import DirectStatement
from core.models import Checkpoint, Decision, Event, Execution
from review.decision_statements import _LOCKED
from tests.api.helpers import account, create_ok, decide, has_status, paused_at, task, wait_for
from tests.conftest import Service, bearer
from tests.support.databases import selected_backends
from tests.support.plans import asyncpg_dsn, generic_plans, scans_of
from tests.support.waiting import until

ONE_CHECKPOINT = [{"stage": "Send", "description": "Bob is told", "verificationQuestion": "Send it?"}]
MAIL = 'Send an email to bob@example.com saying "go".'


async def paused_run(service: Service, key: str, reviewer: str) -> tuple[str, str]:
    execution_id = await create_ok(
        service, key, task(taskDescription=MAIL, checkpoints=ONE_CHECKPOINT, assignedReviewer=reviewer)
    )
    record = await wait_for(service, key, execution_id, paused_at(0))
    return execution_id, record["checkpoints"][0]["checkpointId"]


async def what_was_written(service: Service, execution_id: str, checkpoint_id: str) -> dict[str, Any]:
    async with service.db.reading() as session:
        checkpoint = await session.get_one(Checkpoint, checkpoint_id)
        decisions = list(await session.scalars(sa.select(Decision).where(Decision.checkpoint_id == checkpoint_id)))
        decided = list(
            await session.scalars(
                sa.select(Event.payload).where(Event.execution_id == execution_id, Event.type == "checkpoint.decided")
            )
        )
        status = await session.scalar(sa.select(Execution.status).where(Execution.id == execution_id))
    return {"checkpoint": checkpoint.status, "decisions": decisions, "decided": decided, "execution": status}


async def test_an_approval_is_written_whole_with_its_attempt(service: Service) -> None:
    owner = await account(service, "owner@example.com", "eval:manage")
    execution_id, checkpoint_id = await paused_run(service, owner.key, owner.email)

    code, body = await decide(
        service, owner.key, execution_id, checkpoint_id, {"decision": "approve", "comment": "fine", "rating": 4}
    )

    assert code == 200, body
    written = await what_was_written(service, execution_id, checkpoint_id)
    assert written["checkpoint"] == "approved"
    [row] = written["decisions"]
    assert (row.decision, row.decided_by, row.via, row.attempt, row.comment, row.rating) == (
        "approve", owner.email, "api", 1, "fine", 4
    )
    [event] = written["decided"]
    assert event["attempt"] == 1 and event["by"] == owner.email and event["at"] == body["decision"]["at"]
    # Let go on, the run sends its mail and ends.
    finished = await wait_for(service, owner.key, execution_id, has_status("completed"))
    assert finished["metrics"]["checkpointsApproved"] == 1


async def test_an_approval_racing_a_cancel_is_taken_whole_or_not_at_all(service: Service) -> None:
    owner = await account(service, "owner@example.com", "eval:manage")
    runs = [await paused_run(service, owner.key, owner.email) for _ in range(6)]

    async def approve(execution_id: str, checkpoint_id: str) -> int:
        code, _ = await decide(service, owner.key, execution_id, checkpoint_id, {"decision": "approve"})
        return code

    async def cancel(execution_id: str) -> int:
        path = f"/api/eval/executions/{execution_id}/cancel"
        return (await service.client.post(path, headers=bearer(owner.key))).status_code

    for execution_id, checkpoint_id in runs:
        approved, cancelled = await asyncio.gather(approve(execution_id, checkpoint_id), cancel(execution_id))
        written = await what_was_written(service, execution_id, checkpoint_id)
        # The approval before the cancel (which then stops the run, or finds it done) or refused after it; either
        # way written whole, or not at all.
        assert cancelled in (200, 409), (approved, cancelled, written)
        if approved == 200:
            assert written["checkpoint"] == "approved" and len(written["decisions"]) == len(written["decided"]) == 1
        else:
            assert approved == 409 and cancelled == 200 and written["execution"] == "cancelled", written
            assert written["checkpoint"] == "awaiting_review", written
            assert written["decisions"] == [] and written["decided"] == []


async def _waiting_on_a_lock(conn: asyncpg.Connection, other: int) -> str | None:
    """The statement of the first backend of this database, but `other`, that waits for a lock."""
    found: str | None = await conn.fetchval(
        "SELECT query FROM pg_stat_activity WHERE datname = current_database() AND pid <> $1 "
        "AND wait_event_type = 'Lock' LIMIT 1",
        other,
    )
    return found


# Row locks are PostgreSQL's: SQLite writes one transaction at a time and never decides alone.
@pytest.mark.parametrize("database_url", [b for b in selected_backends() if b == "postgresql"], indirect=True)
async def test_an_approval_meeting_a_decision_in_a_transaction_neither_deadlocks_nor_is_lost(
    service: Service,
) -> None:
    owner = await account(service, "owner@example.com", "eval:manage")
    execution_id, checkpoint_id = await paused_run(service, owner.key, owner.email)
    other = await asyncpg.connect(asyncpg_dsn(service.settings))
    watcher = await asyncpg.connect(asyncpg_dsn(service.settings))
    try:
        # Another decision in a transaction, between its two writes: it holds the checkpoint, not yet the execution.
        held = other.transaction()
        await held.start()
        await other.execute("UPDATE checkpoints SET status = status WHERE id = $1", checkpoint_id)
        approval = asyncio.create_task(
            decide(service, owner.key, execution_id, checkpoint_id, {"decision": "approve"})
        )
        # The statement alone skipped the held row: what waits is the transactional path's compare-and-set,
        # holding no lock on the execution, so the other decision's second write goes through (a deadlock would
        # fail one of the two).
        other_pid = other.get_server_pid()
        waiting = await until(lambda: _waiting_on_a_lock(watcher, other_pid), timeout=10)
        assert waiting.startswith("UPDATE checkpoints SET status="), waiting
        assert not approval.done()
        await other.execute("UPDATE executions SET last_seq = last_seq WHERE id = $1", execution_id)
        await held.rollback()
        code, body = await approval
    finally:
        await other.close()
        await watcher.close()

    assert code == 200, body
    written = await what_was_written(service, execution_id, checkpoint_id)
    assert written["checkpoint"] == "approved" and len(written["decisions"]) == len(written["decided"]) == 1


# A plan's choice of index is PostgreSQL's; SQLite never decides alone.
@pytest.mark.parametrize("database_url", [b for b in selected_backends() if b == "postgresql"], indirect=True)
async def test_a_plain_approval_finds_its_execution_by_id_whatever_the_tables_statistics(service: Service) -> None:
    """The statement's generic plan (a prepared statement's, from its sixth run on) takes the execution by its
    primary key on a table never analyzed, as after a burst of new runs: through the index of runs by status, it
    read every waiting run's row for each approval (issue 25)."""
    owner = await account(service, "owner@example.com", "eval:manage")
    runs = [await paused_run(service, owner.key, owner.email) for _ in range(3)]
    execution_id, checkpoint_id = runs[1]
    locked = DirectStatement(_LOCKED, sets_from_parameters=False)
    dialect = service.db.engine.dialect
    parameters = {"checkpoint_id": checkpoint_id, "execution_id": execution_id, "attempt": 1, "by": owner.email}
    compiled = locked.compiled_for(dialect, tuple(parameters))
    async with generic_plans(service.settings) as conn:
        scans = await scans_of(conn, compiled.sql, compiled.values(parameters), "executions")
        # And the statement finds the run it names, as the approval does.
        assert await conn.fetchval(compiled.sql, *compiled.values(parameters)) == checkpoint_id
    assert scans == ["pk_executions"]


# Only PostgreSQL decides alone.
@pytest.mark.parametrize("database_url", [b for b in selected_backends() if b == "postgresql"], indirect=True)
async def test_an_approval_whose_key_is_read_from_the_database_still_decides_alone(
    service: Service, api_only: Service
) -> None:
    """A key not in the process's key cache (each entry expires after VOUCH_AUTH_CACHE_SECONDS) is read apart from
    the request's session: the approval that follows still commits statement by statement, with no connection of
    its process in a transaction (issue 25: read in the request's session, it sent one approval every few seconds
    the long way)."""
    owner = await account(service, "owner@example.com", "eval:manage")
    execution_id, checkpoint_id = await paused_run(service, owner.key, owner.email)
    # Decided through a second process (no worker of its own) that has never seen the key: what it begins is the
    # approval's, and only the approval's.
    engine = api_only.db.engine.sync_engine
    begun: list[str | None] = []

    def began(connection: Connection) -> None:
        begun.append(connection.get_execution_options().get("isolation_level"))

    event.listen(engine, "begin", began)
    try:
        code, body = await decide(api_only, owner.key, execution_id, checkpoint_id, {"decision": "approve"})
    finally:
        event.remove(engine, "begin", began)

    assert code == 200, body
    assert begun and set(begun) == {"AUTOCOMMIT"}, begun
    written = await what_was_written(service, execution_id, checkpoint_id)
    assert written["checkpoint"] == "approved" and len(written["decisions"]) == len(written["decided"]) == 1
