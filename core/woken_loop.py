"""A worker loop woken by a bus channel and by the beat's look (core/looks.py) when its work is due."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any

import sqlalchemy as sa

from core.db import Database
from core.looks import Looks

log = logging.getLogger(__name__)


async def run_woken(
    db: Database,
    channel: str | None,
    work: Callable[[], Awaitable[Any]],
    stop: asyncio.Event,
    *,
    looks: Looks,
    look: str,
    due: sa.Select[Any],
    name: str,
    failure: str,
) -> None:
    """Run `work` now, then whenever `channel` (if any) carries a message or the beat's look `look` finds `due` rows
    (core/looks.py), until `stop` is set. A failed round is logged (`failure`) and tried again at the next wake-up:
    what it left undone is still due at the next beat."""
    kick = asyncio.Event()
    looks.add(look, due, kick.set)
    listening = None
    if channel is not None:
        listening = db.bus.listen(
            (channel,),
            lambda _channel, _message: kick.set(),
            kick.set,
            name=name,
            meanwhile="the beat's look stands in",
        )
    stopping = asyncio.ensure_future(stop.wait())
    try:
        while not stop.is_set():
            kick.clear()
            try:
                await work()
            except Exception:
                log.exception(failure)
            waiting = asyncio.ensure_future(kick.wait())
            try:
                await asyncio.wait({waiting, stopping}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                waiting.cancel()
    finally:
        stopping.cancel()
        if listening is not None:
            await listening.stop()
