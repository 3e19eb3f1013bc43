"""PostgreSQL's plans for our statements, read with asyncpg beside the service's own connections."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import Any

import asyncpg

from core.settings import Settings


def asyncpg_dsn(settings: Settings) -> str:
    return settings.database_url.replace("postgresql+asyncpg://", "postgresql://", 1)


@asynccontextmanager
async def generic_plans(settings: Settings) -> AsyncIterator[asyncpg.Connection]:
    """A connection that plans every statement as a prepared statement's generic plan (from its sixth run on), on a
    database whose `executions` has never been analyzed, as after a burst of new runs."""
    connection = await asyncpg.connect(asyncpg_dsn(settings))
    try:
        assert await connection.fetchval("SELECT last_analyze IS NULL AND last_autoanalyze IS NULL "
                                         "FROM pg_stat_user_tables WHERE relname = 'executions'")  # fmt: skip
        await connection.execute("SET plan_cache_mode = force_generic_plan")
        yield connection
    finally:
        await connection.close()


async def scans_of(connection: asyncpg.Connection, sql: str, values: Sequence[Any], relation: str) -> list[str]:
    """How each scan of `relation` in the statement's plan reads it: the index's name, or the node's type (an
    UPDATE's own ModifyTable node left out)."""
    explained = await connection.fetchval(f"EXPLAIN (FORMAT JSON) {sql}", *values)
    return _scans(json.loads(explained)[0]["Plan"], relation)


def _scans(plan: dict[str, Any], relation: str) -> list[str]:
    found = []
    if plan.get("Relation Name") == relation and plan["Node Type"] != "ModifyTable":
        found.append(plan.get("Index Name") or plan["Node Type"])
    for child in plan.get("Plans", ()):
        found += _scans(child, relation)
    return found
