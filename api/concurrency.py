"""At most N executions at once per API key (spec §8: 10 simultaneous eval tasks per key).

Queued, running and awaiting-review executions count; finished ones (completed, failed, rejected,
cancelled) do not. The count is a condition of the new execution's INSERT (`SLOT_FREE`), so two creates of
the same key must not run it at the same time, or both see 9 and both insert. It therefore runs in the
create's own write transaction, after that transaction has serialised against every other create of the key
(`serialise_creates`):

- PostgreSQL: the key's api_keys row is locked (FOR NO KEY UPDATE) first; a second create of the key waits
  there until the first commits, and its INSERT (a new statement under READ COMMITTED) then counts the
  first one's execution. The lock cannot share a statement with the count: a statement that waited for a
  lock still reads from the snapshot taken before it waited. NO KEY UPDATE rather than UPDATE: it still
  excludes the other creates but not the foreign-key checks of rows that merely point at the key.
- SQLite: the request's write session begins with BEGIN IMMEDIATE (core/db.py), so it holds the database's
  one write lock from its first statement to its commit; no other create can count meanwhile.
"""

from __future__ import annotations

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncSession

from api.problems import ApiError
from core.db import one_of
from core.models import EXECUTIONS, ApiKey

ACTIVE_STATUSES = ("queued", "running", "awaiting_review")
# Built once: every create runs them. Parameters `key_id` and, for SLOT_FREE, `slot_limit`.
_LOCK_KEY = sa.select(ApiKey.id).where(ApiKey.id == sa.bindparam("key_id")).with_for_update(key_share=True)
_ACTIVE = (EXECUTIONS.c.api_key_id == sa.bindparam("key_id"), one_of(EXECUTIONS.c.status, ACTIVE_STATUSES))
SLOT_FREE = (
    sa.select(sa.func.count()).select_from(EXECUTIONS).where(*_ACTIVE).scalar_subquery()
    < sa.bindparam("slot_limit", type_=sa.Integer())
)
_ACTIVE_BY_STATUS = sa.select(EXECUTIONS.c.status, sa.func.count()).where(*_ACTIVE).group_by(EXECUTIONS.c.status)

# No finish time can be predicted (an execution may await a human for days): a polite polling interval.
RETRY_AFTER_SECONDS = 30


async def serialise_creates(session: AsyncSession, key_id: str) -> None:
    """Make this transaction the only create of the key counting its executions; call it before the INSERT
    whose condition is SLOT_FREE."""
    bind = session.get_bind()
    if bind.dialect.name == "postgresql":
        await session.execute(_LOCK_KEY, {"key_id": key_id})
    elif not bind.get_execution_options().get("vouch_write", False):
        # A deferred (read) transaction would let two creates count at once: refuse to run unsafely.
        raise RuntimeError("the execution slot check needs the request's write (BEGIN IMMEDIATE) session")


async def no_free_slot(session: AsyncSession, key_id: str, limit: int) -> ApiError:
    """The 429 concurrent_limit_exceeded for a create that SLOT_FREE refused, saying what holds the slots."""
    rows = await session.execute(_ACTIVE_BY_STATUS, {"key_id": key_id})
    by_status: dict[str, int] = {status: count for status, count in rows}
    active = sum(by_status.values())
    parts = ", ".join(f"{by_status[s]} {s.replace('_', ' ')}" for s in ACTIVE_STATUSES if by_status.get(s))
    return ApiError(
        429,
        "concurrent_limit_exceeded",
        f"this API key already has {active} executions in progress ({parts}); at most {limit} may be queued, "
        f"running or awaiting review at once; create another when one of them finishes or is cancelled",
        headers={"Retry-After": str(RETRY_AFTER_SECONDS)},
    )
