"""Fixtures for the chat: a live web process (Socket.IO needs a real server) and a worker-side Database."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import pytest

from chat.fanout import WorkerEmitter
from core.bus import InProcessBus
from core.db import Database
from core.settings import Settings
from tests.chat.helpers import REDIS_URL, Watcher
from tests.support.live import live_server


@pytest.fixture
def chat_settings(settings: Settings) -> Settings:
    # The live server's own address is its origin: no configured base URL to compare against.
    return settings.with_changes(base_url=None, redis_url=REDIS_URL)


@pytest.fixture
def web(chat_settings: Settings) -> Iterator[str]:
    """A web process (no worker) whose Socket.IO manager listens on Redis; its base URL."""
    with live_server(chat_settings, run_worker=False) as base:
        yield base


@pytest.fixture
async def worker_db(chat_settings: Settings) -> AsyncIterator[Database]:
    """The Database as `vouch worker` sets it up: committed events go to the chat rooms through Redis."""
    emitter = WorkerEmitter(REDIS_URL)
    database = Database(chat_settings.database_url, InProcessBus())
    database.add_event_sink(emitter.sink)
    yield database
    await database.dispose()
    await emitter.close()


@pytest.fixture
async def watchers() -> AsyncIterator[list[Watcher]]:
    """Watchers made by a test, disconnected after it."""
    made: list[Watcher] = []
    yield made
    for watcher in made:
        await watcher.close()
