"""Wake-ups for a loop that the beat's look wakes too (the mail dispatcher, the webhook sender, the trace exporter):
woken at once by a message on its channels, by `wake` (core/looks.py) when the look finds its work due.

Built on `Bus.listen`, whose subscription keeps itself up (core/redis_listening.py, core/reconnect.py): when Redis goes
away the beat's look is all it has, and when the subscription is back the loop is woken once, for what was
published meanwhile. Nothing here can fail the loop: a lost connection is the listener's to mend, never raised.
"""

from __future__ import annotations

import asyncio
from typing import Any

from core.bus import Bus


class Wakeups:
    def __init__(self, bus: Bus, channels: tuple[str, ...], name: str) -> None:
        self._channels = frozenset(channels)
        self._woken = asyncio.Event()
        self._listening = bus.listen(
            channels, self._heard, self._reset, name=name, meanwhile="the beat's look stands in"
        )

    def _heard(self, channel: str, message: dict[str, Any]) -> None:
        if channel in self._channels:  # `listen` takes prefixes: "vouch:mail" would hear "vouch:mailbox" too
            self._woken.set()

    def _reset(self) -> None:
        # Subscribed (again): look now for what was published meanwhile. A failed attempt wakes nobody: while
        # Redis is away the loop keeps the beat's pace, not the attempts'.
        if self._listening.healthy:
            self._woken.set()

    @property
    def healthy(self) -> bool:
        """Subscribed: a message published from now on wakes the loop."""
        return self._listening.healthy

    def wake(self) -> None:
        """Wake the loop as a message would: its work is due."""
        self._woken.set()

    async def wait(self, timeout: float | None = None) -> bool:
        """Until a wake-up (one since the last `wait` counts) or `timeout` seconds (None: no end); whether woken."""
        try:
            async with asyncio.timeout(timeout):
                await self._woken.wait()
        except TimeoutError:
            return False
        self._woken.clear()
        return True

    async def stop(self) -> None:
        await self._listening.stop()
