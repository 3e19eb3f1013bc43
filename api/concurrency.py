"""At most N executions at once per API key (spec §8: 10 simultaneous eval tasks per key).

Queued, running and awaiting-review executions count; finished ones (completed, failed, rejected,
cancelled) do not. The count is a condition of the new execution's INSERT (each backend's `slot_free`, put there by
agents/creating.py, where a suite's scheduler starts runs under the same limit), so two creates of
the same key must not count at the same time, or both see 9 and both insert (each backend's `slot_free`,
core/backends):

- PostgreSQL: the condition is `vouch_slot_free` (migration 0006), which locks the key's api_keys row
  (FOR NO KEY UPDATE) and then counts. A second create of the key waits at the lock until the first commits;
  its count, a statement of its own inside a VOLATILE function, takes its snapshot after the wait and so sees
  the first one's execution. (A plain subquery could not: a statement that waited for a lock still reads the
  snapshot taken before it waited.) NO KEY UPDATE rather than UPDATE: it still excludes the other creates but
  not the foreign-key checks of rows that merely point at the key.
- SQLite: the request's write session begins with BEGIN IMMEDIATE (core/db.py), so it holds the database's
  one write lock from its first statement to its commit; no other create can count meanwhile
  (`agents.creating.check_creates_serialised`).
"""

from __future__ import annotations

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncSession

from api.problems import ApiError
from core.db import one_of
from core.models import EXECUTIONS
from core.vocabulary import ACTIVE

# Built once: every create runs one of them. Parameters `key_id` and `slot_limit`.
_ACTIVE = (EXECUTIONS.c.api_key_id == sa.bindparam("key_id"), one_of(EXECUTIONS.c.status, ACTIVE))
_ACTIVE_BY_STATUS = sa.select(EXECUTIONS.c.status, sa.func.count()).where(*_ACTIVE).group_by(EXECUTIONS.c.status)

# No finish time can be predicted (an execution may await a human for days): a polite polling interval.
RETRY_AFTER_SECONDS = 30


async def no_free_slot(session: AsyncSession, key_id: str, limit: int) -> ApiError:
    """The 429 concurrent_limit_exceeded for a create that `slot_free` refused, saying what holds the slots."""
    rows = await session.execute(_ACTIVE_BY_STATUS, {"key_id": key_id})
    by_status: dict[str, int] = {status: count for status, count in rows}
    active = sum(by_status.values())
    parts = ", ".join(f"{by_status[s]} {s.replace('_', ' ')}" for s in ACTIVE if by_status.get(s))
    return ApiError(
        429,
        "concurrent_limit_exceeded",
        f"this API key already has {active} executions in progress ({parts}); at most {limit} may be queued, "
        f"running or awaiting review at once; create another when one of them finishes or is cancelled",
        headers={"Retry-After": str(RETRY_AFTER_SECONDS)},
    )
