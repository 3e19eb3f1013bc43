"""A server process's start-up objects are frozen out of the collector's walks once start-up is over."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from api.app import create_app, freeze_heap_once_serving
from core.settings import Settings


@pytest.fixture
def unfrozen() -> Iterator[None]:
    # The test process makes many apps: nothing frozen here may stay frozen after it.
    gc.unfreeze()
    yield
    gc.unfreeze()


def collector_walks(thing: object) -> bool:
    """Whether full collections still walk `thing` (frozen objects sit in no generation)."""
    return any(seen is thing for seen in gc.get_objects())


async def test_what_start_up_made_is_frozen_once_serving(settings: Settings, unfrozen: None) -> None:
    app = create_app(settings)
    freeze_heap_once_serving(app)
    async with app.test_app():
        # Made by a before_serving hook: the freeze ran after every one of them.
        services = app.extensions["vouch"]
        assert gc.is_tracked(services) and not collector_walks(services)
        assert gc.get_freeze_count() > 10_000
        made_after = [object()]
        assert collector_walks(made_after)


async def test_an_app_made_for_tests_freezes_nothing(settings: Settings, unfrozen: None) -> None:
    app = create_app(settings)
    async with app.test_app():
        assert gc.get_freeze_count() == 0
        assert collector_walks(app.extensions["vouch"])
