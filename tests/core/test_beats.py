"""core/beats.py: every look of one period waits for the same moment, never longer than the period."""

from __future__ import annotations

import asyncio

import pytest

from core.beats import seconds_to_beat


@pytest.mark.parametrize("period", [0.05, 0.2, 5.0, 15.0, 60.0])
async def test_the_wait_ends_on_a_multiple_of_the_period_within_one_period(period: float) -> None:
    loop = asyncio.get_running_loop()
    now = loop.time()
    wait = seconds_to_beat(period)
    assert 0 < wait <= period
    due = now + wait
    # Within a millisecond of a multiple: the clock moved between `now` and the call's own read.
    assert abs(due - round(due / period) * period) < 1e-3


async def test_looks_begun_at_different_moments_of_one_period_fall_due_together() -> None:
    loop = asyncio.get_running_loop()
    deadlines = set()
    for _ in range(50):
        deadlines.add(round(loop.time() + seconds_to_beat(60.0), 3))
        await asyncio.sleep(0)  # other turns of the loop between the looks
    # Fifty reads of the clock: at most one crossing of a beat among them.
    assert len(deadlines) <= 2 and max(deadlines) - min(deadlines) in (0, 60.0)
