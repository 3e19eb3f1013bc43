"""How a long-running loop that holds a Redis subscription reports losing it and paces getting it back.

Every such loop (the bus listeners behind wake-ups, mail, webhooks and caches: core/redis_listening.py; the chat's
Socket.IO listener: chat/fanout.py) behaves alike: ONE warning when the connection is lost or cannot be made at
start, however many attempts fail after it; a wait between attempts that doubles up to a cap (with jitter, so
the processes of a fleet do not all reconnect in the same instant after Redis restarts); ONE line when it is
subscribed again. What the loop does meanwhile (poll, bypass a cache) is its own business and said by `meanwhile`.
"""

from __future__ import annotations

import asyncio
import logging
import random

log = logging.getLogger(__name__)


class Reconnecting:
    FIRST_SECONDS = 0.1
    CAP_SECONDS = 5.0

    def __init__(self, name: str, meanwhile: str) -> None:
        self.name = name
        self.meanwhile = meanwhile
        self._failures = 0
        self._warned = False

    def delay(self) -> float:
        """The wait before the next attempt, after `self._failures` failed ones in a row."""
        ceiling = min(self.CAP_SECONDS, self.FIRST_SECONDS * 2.0 ** max(0, self._failures - 1))
        return ceiling * random.uniform(0.5, 1.0)

    def failed(self, exc: BaseException) -> float:
        """Count a failed or lost subscription (warning the first time); the seconds to wait before the next."""
        self._failures += 1
        if not self._warned:
            self._warned = True
            log.warning(
                "%s lost Redis (%s); %s until it is back, trying again meanwhile", self.name, exc, self.meanwhile
            )
        delay = self.delay()
        log.debug("%s: attempt %d failed (%s); the next in %.2f s", self.name, self._failures, exc, delay)
        return delay

    async def wait_after(self, exc: BaseException) -> None:
        await asyncio.sleep(self.failed(exc))

    def subscribed(self) -> None:
        """Subscribed (again): says so once if a warning said it was lost."""
        if self._warned:
            log.info("%s: Redis is back, subscribed again after %d failed attempt(s)", self.name, self._failures)
        self._failures = 0
        self._warned = False
