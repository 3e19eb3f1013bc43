"""Helpers for the rate-limit tests: a clock to stop time, Redis clean-up, a dead port, an app per settings."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import redis.asyncio as aioredis

from api.app import create_app
from core.settings import Settings
from tests.conftest import Service
from tests.support.ports import free_port

REDIS_URL = "redis://127.0.0.1:6379/0"
START = 1_800_000_000_000_000  # microseconds: an epoch-sized clock, as Redis's TIME would give


class FakeClock:
    """Microseconds that move only when told to."""

    def __init__(self, now: int = START) -> None:
        self.now = now

    def __call__(self) -> int:
        return self.now

    def advance(self, micros: int) -> None:
        self.now += micros


async def delete_prefix(prefix: str) -> None:
    client = aioredis.Redis.from_url(REDIS_URL)
    try:
        async for key in client.scan_iter(match=f"{prefix}*"):
            await client.delete(key)
    finally:
        await client.aclose()


def closed_port() -> int:
    return free_port()  # nothing listens there


@asynccontextmanager
async def serving(settings: Settings) -> AsyncIterator[Service]:
    """The web app (no worker) built from `settings`, for tests that need other settings than the fixture's."""
    app = create_app(settings, run_worker=False)
    async with app.test_app() as test_app:
        yield Service(app, test_app.test_client(), settings)
