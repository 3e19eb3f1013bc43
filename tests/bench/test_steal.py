"""bench/steal.py reads the host's steal from this machine's /proc/stat, as a share of the time gone by."""

from __future__ import annotations

import re
import time

from bench.steal import Steal, cpu_ticks


def test_ticks_count_up_and_steal_is_part_of_them() -> None:
    stolen, total = cpu_ticks()
    assert 0 <= stolen <= total
    deadline = time.monotonic() + 10
    while cpu_ticks()[1] == total:  # busy until the kernel's counters move (100 ticks a second)
        assert time.monotonic() < deadline, "/proc/stat did not move in 10 s"
    later_stolen, later_total = cpu_ticks()
    assert later_total > total and later_stolen >= stolen


def test_a_reading_is_a_share_of_the_time_since_the_last() -> None:
    steal = Steal()
    first = cpu_ticks()[1]
    deadline = time.monotonic() + 10
    while cpu_ticks()[1] == first:
        assert time.monotonic() < deadline
    share = steal.since_last()
    assert re.fullmatch(r"\d{1,3}%", share), share
    assert int(share[:-1]) <= 100
