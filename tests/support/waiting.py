"""Waiting for the system to reach a state: woken by its own bus events, bounded in time."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

from core.bus import Bus, execution_channel

T = TypeVar("T")


async def until(
    check: Callable[[], Awaitable[T | None]], *, bus: Bus | None = None, channel: str | None = None, timeout: float = 15
) -> T:
    """Re-run `check` whenever the channel carries news (or every 50 ms without a bus) until it
    returns something other than None; fail after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    if bus is not None and channel is not None:
        async with bus.subscribe(channel) as sub:
            while (value := await check()) is None:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise AssertionError(f"condition not reached within {timeout} s")
                await sub.get(timeout=min(remaining, 1.0))
            return value
    while (value := await check()) is None:
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not reached within {timeout} s")
        await asyncio.sleep(0.05)
    return value


def channel_of(execution_id: str) -> str:
    return execution_channel(execution_id)
