"""A worker's stop: what does not end when asked is named in the log, so that a hung stop can be read, not guessed."""

from __future__ import annotations

import asyncio
import logging

import pytest

import agents.worker as worker_module
from agents.worker import Worker
from core.db import Database
from core.settings import Settings
from tests.support.waiting import until


async def test_a_stop_that_hangs_names_the_task_it_waits_for(
    db: Database, settings: Settings, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    caplog.set_level(logging.INFO, logger="agents.worker")
    monkeypatch.setattr(worker_module, "STOP_WARNING_SECONDS", 0.2)
    worker = Worker(settings, db, "stuck-worker")
    stop = asyncio.Event()
    running = asyncio.create_task(worker.run(stop))
    release = asyncio.Event()

    async def a_run_that_will_not_stop() -> None:
        while not release.is_set():
            try:
                await release.wait()
            except asyncio.CancelledError:
                continue  # the bug this warns about: a cancellation swallowed

    def said(start: str) -> list[str]:
        return [r.getMessage() for r in caplog.records if r.getMessage().startswith(start)]

    async def lines(start: str) -> list[str] | None:
        return said(start) or None

    try:
        await until(lambda: lines("worker stuck-worker started"))
        stuck = asyncio.create_task(a_run_that_will_not_stop())
        worker._running.add(stuck)  # as `_start` adds a run
        stop.set()

        async def named() -> str | None:
            # A helper slow to stop on a loaded machine may be named too: what matters is that the stuck run is.
            warnings = said("stopping for 0.2 s, still waiting for")
            return next((w for w in warnings if "a_run_that_will_not_stop" in w), None)

        warning = await until(named)
        assert "release.wait()" in warning, warning
        assert not running.done() and not said("worker stuck-worker stopped")
    finally:
        release.set()
        stop.set()
        await asyncio.wait_for(running, 15)
    assert said("worker stuck-worker stopped")
