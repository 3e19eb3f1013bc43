"""When a process's periodic looks wake: on beats, the multiples of their period on the event loop's clock.

A worker keeps several safety-net polls (claims, scoring, suites, webhooks, mail, review timers, external agents'
silence), each every few seconds. Each sleeping from the end of its own last round, they drift apart, and an idle
worker woke once for each: on this kind of virtual machine a wake-up after a second's sleep costs several
milliseconds of CPU, more than the look it wakes for. Waiting for the next beat instead, the looks of one period
fall due together and run in one wake-up; their statements go out together too (bench figure `idle-processes`,
bench/README.md, issue 25). Nothing depends on the beat for correctness: a look is never later than its period.
"""

from __future__ import annotations

import asyncio
import math


def seconds_to_beat(period: float) -> float:
    """Seconds from now to the next multiple of `period` on the running loop's clock: at most `period`."""
    now = asyncio.get_running_loop().time()
    wait = (math.floor(now / period) + 1) * period - now
    return wait if wait > 0 else period  # `now / period` rounded down across a multiple: that multiple is now
