"""A worker loop woken by a bus channel, with polling as the safety net when a wake-up is lost."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from core.beats import seconds_to_beat
from core.db import Database

log = logging.getLogger(__name__)


async def run_woken(
    db: Database,
    channel: str,
    work: Callable[[], Awaitable[Any]],
    stop: asyncio.Event,
    *,
    poll_seconds: float,
    name: str,
    failure: str,
) -> None:
    """Run `work` now, then whenever `channel` carries a message or at the next beat of `poll_seconds`
    (core/beats.py), until `stop` is set.
    A failed round is logged (`failure`) and tried again at the next wake-up or poll."""
    kick = asyncio.Event()
    listening = db.bus.listen(
        (channel,), lambda _channel, _message: kick.set(), kick.set, name=name, meanwhile="it polls on its own"
    )
    try:
        while not stop.is_set():
            kick.clear()
            try:
                await work()
            except Exception:
                log.exception(failure)
            waiting = asyncio.ensure_future(kick.wait())
            stopping = asyncio.ensure_future(stop.wait())
            with contextlib.suppress(TimeoutError):
                await asyncio.wait(
                    {waiting, stopping}, timeout=seconds_to_beat(poll_seconds), return_when=asyncio.FIRST_COMPLETED
                )
            waiting.cancel()
            stopping.cancel()
    finally:
        await listening.stop()
