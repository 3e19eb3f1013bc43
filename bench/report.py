"""How a benchmark reports: percentiles, and one `FIGURE <name> [<backend>]` line per figure."""

from __future__ import annotations

import math
from collections.abc import Sequence


def percentile(values: Sequence[float], q: float) -> float:
    if not values:
        return math.nan
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))]


def spread(values: Sequence[float], unit: str = "ms") -> str:
    return (
        f"n={len(values)} p50={percentile(values, 0.5):.2f} {unit} p99={percentile(values, 0.99):.2f} {unit} "
        f"max={max(values, default=math.nan):.2f} {unit}"
    )


def figure(name: str, backend: str, text: str, goal: str = "", met: bool | None = None) -> None:
    """One result line; `python -m bench` and the CI test look for `FIGURE <name> [<backend>]`."""
    verdict = "" if met is None else (" (met)" if met else " (MISSED)")
    goal_text = f" | goal {goal}{verdict}" if goal else ""
    print(f"FIGURE {name} [{backend}] {text}{goal_text}", flush=True)


def note(text: str) -> None:
    print(f"  {text}", flush=True)
