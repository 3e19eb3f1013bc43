"""CPU time the hypervisor took from this virtual machine ("steal", /proc/stat): on a shared host it moves every
figure as much as the load average does, and the load average does not show it."""

from __future__ import annotations

from pathlib import Path

_STAT = Path("/proc/stat")


def cpu_ticks() -> tuple[int, int]:
    """(stolen, all) ticks of every CPU since boot; (0, 0) where the kernel does not say."""
    try:
        first = _STAT.read_text().splitlines()[0].split()
    except (OSError, IndexError):
        return 0, 0
    if first[0] != "cpu" or len(first) < 9:
        return 0, 0
    # user nice system idle iowait irq softirq steal [guest guest_nice: already counted in user and nice]
    ticks = [int(value) for value in first[1:9]]
    return ticks[7], sum(ticks)


class Steal:
    """The share of CPU time stolen since the last reading (or since it was made)."""

    def __init__(self) -> None:
        self._last = cpu_ticks()

    def since_last(self) -> str:
        now = cpu_ticks()
        stolen, total = now[0] - self._last[0], now[1] - self._last[1]
        self._last = now
        return f"{stolen / total:.0%}" if total > 0 else "unknown"
