"""A run's own statements find its row by primary key whatever the table's statistics.

PostgreSQL runs a prepared statement with a generic plan from its sixth run on. On a table not analyzed since a
burst of new runs (a deploy's first minute, the bench's 300 runs created at once), that plan took the row named by
id through `ix_executions_claim` (status, lease) when the statement also tested the status, and filtered every
running (or runnable) run's entry by id: one step of one run read the index entries of all of them (issue 25; the
plain approval's statement had the same fault, tests/api/test_decision_alone.py)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from agents.claims import _CLAIM_BY_ID, _TAKING_OVER
from agents.runner import _FENCE
from agents.tool_calls import _FENCED_STEP
from core._sqlalchemy_shortcuts import DirectStatement
from core.db import Database
from core.models import utcnow
from core.settings import Settings
from tests.agents.test_runner import NOTE_THEN_MAIL, new_execution
from tests.support.databases import selected_backends
from tests.support.plans import generic_plans, scans_of


# A plan's choice of index is PostgreSQL's; SQLite plans every statement afresh with what it knows.
@pytest.mark.parametrize("database_url", [b for b in selected_backends() if b == "postgresql"], indirect=True)
async def test_a_runs_statements_take_its_row_by_primary_key_on_a_table_never_analyzed(
    db: Database, settings: Settings
) -> None:
    execution_id = await new_execution(db, settings, NOTE_THEN_MAIL)
    now = utcnow()
    fenced = {
        "execution_id": execution_id,
        "claim_worker": "worker-1",
        "claim_epoch": 1,
        "renewed_until": now + timedelta(seconds=30),
    }
    step = {**fenced, "count": 3, "saved_state": {"agent": "offline", "cursor": 1}}
    statements: dict[str, tuple[DirectStatement, dict[str, Any]]] = {
        "the fence": (DirectStatement(_FENCE), fenced),
        "a step": (_FENCED_STEP, step),
        "the step taking a claim over": (
            _TAKING_OVER[_FENCED_STEP],
            {**step, "seen_epoch": 0, "seen_seq": 1, "now": now},
        ),
        "the claim by id": (
            db.backend.claim_statement(_CLAIM_BY_ID),
            {
                "wanted": execution_id,
                "now": now,
                "claimant": "worker-1",
                "claimed_until": now + timedelta(seconds=30),
                "claim_payload": {"worker": "worker-1"},
            },
        ),
    }
    dialect = db.engine.dialect
    read: dict[str, list[str]] = {}
    async with generic_plans(settings) as connection:
        for name, (statement, parameters) in statements.items():
            compiled = statement.compiled_for(dialect, tuple(parameters))
            read[name] = await scans_of(connection, compiled.sql, compiled.values(parameters), "executions")
    assert read == {name: ["pk_executions"] for name in statements}
