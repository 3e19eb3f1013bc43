"""At most N executions at once per API key (spec §8: 10 simultaneous eval tasks per key).

Queued, running and awaiting-review executions count; finished ones (completed, failed, rejected,
cancelled) do not. The check is a count followed by the insert, so two creates of the same key must not
count at the same time, or both see 9 and both insert. The count therefore runs in the create's own write
transaction, after that transaction has serialised against every other create of the key:

- PostgreSQL: the key's api_keys row is locked (FOR NO KEY UPDATE) before counting; a second create of
  the key waits there until the first commits, and its count (a new statement under READ COMMITTED) then
  sees the first one's execution. NO KEY UPDATE rather than UPDATE: it still excludes the other creates
  but not the foreign-key checks of rows that merely point at the key.
- SQLite: the request's write session begins with BEGIN IMMEDIATE (core/db.py), so it holds the database's
  one write lock from its first statement to its commit; no other create can count meanwhile.
"""

from __future__ import annotations

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncSession

from api.problems import ApiError
from core.models import ApiKey, Execution

ACTIVE_STATUSES = ("queued", "running", "awaiting_review")
# Built once: every create runs them.
_LOCK_KEY = sa.select(ApiKey.id).where(ApiKey.id == sa.bindparam("key_id")).with_for_update(key_share=True)
_ACTIVE_BY_STATUS = (
    sa.select(Execution.status, sa.func.count())
    .where(Execution.api_key_id == sa.bindparam("key_id"), Execution.status.in_(ACTIVE_STATUSES))
    .group_by(Execution.status)
)

# No finish time can be predicted (an execution may await a human for days): a polite polling interval.
RETRY_AFTER_SECONDS = 30


async def ensure_execution_slot(session: AsyncSession, key_id: str, limit: int) -> None:
    """Raise 429 concurrent_limit_exceeded when the key already has `limit` active executions. Call it in
    the transaction that inserts the new execution, right before the insert."""
    bind = session.get_bind()
    if bind.dialect.name == "postgresql":
        await session.execute(_LOCK_KEY, {"key_id": key_id})
    elif not bind.get_execution_options().get("vouch_write", False):
        # A deferred (read) transaction would let two creates count at once: refuse to run unsafely.
        raise RuntimeError("the execution slot check needs the request's write (BEGIN IMMEDIATE) session")
    rows = await session.execute(_ACTIVE_BY_STATUS, {"key_id": key_id})
    by_status: dict[str, int] = {status: count for status, count in rows}
    active = sum(by_status.values())
    if active < limit:
        return
    parts = ", ".join(f"{by_status[s]} {s.replace('_', ' ')}" for s in ACTIVE_STATUSES if by_status.get(s))
    raise ApiError(
        429,
        "concurrent_limit_exceeded",
        f"this API key already has {active} executions in progress ({parts}); at most {limit} may be queued, "
        f"running or awaiting review at once; create another when one of them finishes or is cancelled",
        headers={"Retry-After": str(RETRY_AFTER_SECONDS)},
    )
