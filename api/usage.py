"""API key usage: counted in memory per process, written in batches.

A request must not cost a database write just to say "this key was used": that would turn every read into a
write (and serialise SQLite). Instead `record` adds to an in-memory tally, and `flush` writes the tally for
all keys in one transaction: per key one `use_count += n, last_used_at, last_used_ip` update and one upsert
of the per-UTC-day count. `run` flushes every `interval` seconds (a minute by default) and once more on stop,
so each key costs at most one write per interval and process. Counts not yet flushed are not visible; a
process killed hard loses at most one interval of counts, never a key's validity (that lives in the row).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import cast

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncSession

from core.backends import backend_of
from core.db import Database
from core.models import ApiKey, ApiKeyUsage

log = logging.getLogger(__name__)

USAGE_DAYS = 30


@dataclass
class _Tally:
    by_day: dict[str, int] = field(default_factory=dict)
    last_at: datetime | None = None
    last_ip: str | None = None

    def add(self, day: str, count: int, at: datetime, ip: str | None) -> None:
        self.by_day[day] = self.by_day.get(day, 0) + count
        if self.last_at is None or at >= self.last_at:
            self.last_at, self.last_ip = at, ip

    @property
    def total(self) -> int:
        return sum(self.by_day.values())


def day_of(at: datetime) -> str:
    return at.astimezone(UTC).date().isoformat()


class UsageRecorder:
    """One per process (held on the app's Services): `record` on every accepted key, `flush` in batches."""

    def __init__(self, db: Database, *, interval: float = 60.0) -> None:
        self.db = db
        self.interval = interval
        self._pending: dict[str, _Tally] = {}

    def record(self, key_id: str, ip: str | None, at: datetime) -> None:
        """Count one use of a key; no I/O, so it costs the request nothing."""
        self._pending.setdefault(key_id, _Tally()).add(day_of(at), 1, at, ip)

    @property
    def pending(self) -> int:
        return sum(tally.total for tally in self._pending.values())

    async def flush(self) -> int:
        """Write everything counted so far; returns how many keys were written."""
        # Swap before the first await: uses recorded while we write land in the next batch.
        batch, self._pending = self._pending, {}
        if not batch:
            return 0
        try:
            async with self.db.transaction() as session:
                written = await _write(session, batch)
        except Exception:
            # Keep the counts for the next try rather than losing them to a blip in the database.
            for key_id, tally in batch.items():
                mine = self._pending.setdefault(key_id, _Tally())
                for day, count in tally.by_day.items():
                    assert tally.last_at is not None
                    mine.add(day, count, tally.last_at, tally.last_ip)
            raise
        return written

    async def run(self, stop: asyncio.Event) -> None:
        """Flush every `interval` seconds until `stop` is set, then once more."""
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), timeout=self.interval)
            try:
                await self.flush()
            except Exception:
                log.warning("writing API key usage failed; will retry", exc_info=True)
            if stop.is_set():
                return


async def _write(session: AsyncSession, batch: dict[str, _Tally]) -> int:
    # Keys deleted (with their user) since they were used would break the usage rows' foreign key.
    existing = set(await session.scalars(sa.select(ApiKey.id).where(ApiKey.id.in_(list(batch)))))
    tallies = {key_id: tally for key_id, tally in batch.items() if key_id in existing}
    if not tallies:
        return 0
    keys = cast(sa.Table, ApiKey.__table__)
    usage = cast(sa.Table, ApiKeyUsage.__table__)
    at = sa.bindparam("at", type_=keys.c.last_used_at.type)
    # The CASE keeps the newest use when several processes flush out of order.
    newer = sa.or_(keys.c.last_used_at.is_(None), keys.c.last_used_at < at)
    update = (
        sa.update(keys)
        .where(keys.c.id == sa.bindparam("key_id"))
        .values(
            use_count=keys.c.use_count + sa.bindparam("n", type_=sa.BigInteger()),
            last_used_ip=sa.case((newer, sa.bindparam("ip", type_=sa.String())), else_=keys.c.last_used_ip),
            last_used_at=sa.case((newer, at), else_=keys.c.last_used_at),
        )
    )
    insert = backend_of(session).insert(usage)
    upsert = insert.on_conflict_do_update(
        index_elements=[usage.c.api_key_id, usage.c.day], set_={"count": usage.c.count + insert.excluded.count}
    )
    # Core executemany: one statement per table for the whole batch, whatever the number of keys.
    connection = await session.connection()
    await connection.execute(
        update,
        [
            {"key_id": key_id, "n": tally.total, "at": tally.last_at, "ip": tally.last_ip}
            for key_id, tally in tallies.items()
        ],
    )
    await connection.execute(
        upsert,
        [
            {"api_key_id": key_id, "day": day, "count": count}
            for key_id, tally in tallies.items()
            for day, count in sorted(tally.by_day.items())
        ],
    )
    return len(tallies)


async def usage_by_day(session: AsyncSession, key_ids: list[str], now: datetime) -> dict[str, dict[str, int]]:
    """Per key, the count for each of the last USAGE_DAYS UTC days (today included), oldest first."""
    days = [day_of(now - timedelta(days=back)) for back in range(USAGE_DAYS - 1, -1, -1)]
    result = {key_id: dict.fromkeys(days, 0) for key_id in key_ids}
    if not key_ids:
        return result
    rows = await session.execute(
        sa.select(ApiKeyUsage.api_key_id, ApiKeyUsage.day, ApiKeyUsage.count).where(
            ApiKeyUsage.api_key_id.in_(key_ids), ApiKeyUsage.day >= days[0]
        )
    )
    for key_id, day, count in rows:
        if day in result[key_id]:
            result[key_id][day] = count
    return result
