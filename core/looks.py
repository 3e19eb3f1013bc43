"""A worker's safety-net looks, asked at each beat as one statement.

The worker's loops (claims, scoring, suites, webhooks, mail, review timers, trace export) are woken by the bus as
their work appears; a look every few seconds is their safety net, for lost wake-ups and leases left by dead
workers. Each used to make its own look at every beat (core/beats.py): six to eight statements, two or three of
them writes (the claims', the webhooks' and the mail's claim statements: SQLite's write lock taken every beat by
an idle worker), and on a virtual machine that charges dearly for memory touched after an idle spell, ~34 ms
of CPU a beat (bench/README.md, 2026-12-07 23:08). Here one read asks whether any of them has something due, and
wakes only those that have. A look that cannot be asked (the database away) wakes them all: each then finds out
for itself, as before.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa

from core.beats import seconds_to_beat
from core.db import Database
from core.models import UTCDateTime, utcnow

log = logging.getLogger(__name__)

# The moment a look is asked at: the bind parameter every `Looks.add` query may compare with.
NOW = sa.bindparam("now", type_=UTCDateTime())


@dataclass(frozen=True)
class _Look:
    name: str
    rows: sa.Select[Any]
    wake: Callable[[], None]


class Looks:
    def __init__(self, db: Database, period: float) -> None:
        self._db = db
        self._period = period
        self._looks: list[_Look] = []
        self._asking: sa.Select[*tuple[bool, ...]] | None = None

    def add(self, name: str, rows: sa.Select[Any], wake: Callable[[], None]) -> None:
        """At each beat, call `wake` if `rows` (a query over bind parameter `now`, `NOW`) finds any: the rows the
        loop would act on at that moment. Asked as EXISTS, so `rows` should be what an index answers at once."""
        self._looks.append(_Look(name, rows, wake))
        self._asking = None

    async def run(self, stop: asyncio.Event) -> None:
        """Look at every beat of the period until `stop` is set."""
        while not stop.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), seconds_to_beat(self._period))
            if not stop.is_set():
                await self.look()

    async def look(self) -> list[str]:
        """Ask once, wake the looks with something due; their names."""
        if not self._looks:
            return []
        asking = self._asking
        if asking is None:
            asking = self._asking = sa.select(*(sa.exists(look.rows).label(look.name) for look in self._looks))
        try:
            async with self._db.reading() as session:
                due = tuple((await session.execute(asking, {"now": utcnow()})).one())
        except Exception:
            log.exception("the worker's look failed; every loop looks for itself")
            due = (True,) * len(self._looks)
        woken = [look for look, found in zip(self._looks, due, strict=True) if found]
        for look in woken:
            look.wake()
        return [look.name for look in woken]
