"""Chart geometry for a suite's page, from its summary (the GET /api/eval/suites/<id> record), drawn as inline SVG by
templates/api/_suite_charts.html: each model's pass rate with its 95 % interval, and cost against pass rate.

As in charts.py: no script, colours from classes in static/css/vouch.css, labels through the templates' escaping.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

LEFT = 230  # room for "model (mode)" labels
PLOT = 440
RIGHT = 90  # room for the value after the interval
ROW = 26
TOP = 10
AXIS_ROOM = 22


def _label(row: Mapping[str, Any]) -> str:
    return f"{row['model']} ({row['testMode']})"


@dataclass(frozen=True)
class Tick:
    position: float
    label: str


@dataclass(frozen=True)
class IntervalRow:
    label: str
    y: float
    rate: float | None
    x: float | None  # the pass rate's dot
    low_x: float | None
    high_x: float | None
    text: str


@dataclass(frozen=True)
class IntervalChart:
    rows: list[IntervalRow]
    ticks: list[Tick]
    width: float
    height: float
    left: float = LEFT
    right_edge: float = LEFT + PLOT


def pass_rates(by_model: Sequence[Mapping[str, Any]]) -> IntervalChart:
    """One line per model and mode: the interval as a whisker, the pass rate as a dot on it, on a 0-100 % axis."""

    def x_of(value: float) -> float:
        return LEFT + PLOT * min(1.0, max(0.0, value))

    rows = []
    for i, row in enumerate(by_model):
        y = TOP + i * ROW + ROW / 2
        rate, interval = row.get("passRate"), row.get("passRateInterval")
        if rate is None:
            rows.append(IntervalRow(_label(row), y, None, None, None, None, "no scored run"))
            continue
        low, high = interval if interval else (rate, rate)
        text = f"{rate * 100:.0f}% ({low * 100:.0f} to {high * 100:.0f}%, {row.get('scored', 0)} scored)"
        rows.append(IntervalRow(_label(row), y, rate, x_of(rate), x_of(low), x_of(high), text))
    ticks = [Tick(x_of(share / 4), f"{share * 25}%") for share in range(5)]
    height = TOP + len(rows) * ROW + AXIS_ROOM
    return IntervalChart(rows, ticks, LEFT + PLOT + RIGHT, height)


SCATTER_LEFT, SCATTER_PLOT_W, SCATTER_PLOT_H, SCATTER_TOP = 60, 560, 240, 14
LABEL_STEP = 13


@dataclass(frozen=True)
class Point:
    label: str
    x: float
    y: float
    label_y: float  # below the labels of points drawn at the same place, not over them
    cost: float
    rate: float
    mode: str  # with-verification | without-verification: its class, so the two modes read apart


@dataclass(frozen=True)
class Scatter:
    points: list[Point]
    x_ticks: list[Tick]
    y_ticks: list[Tick]
    unplotted: list[str]  # models with no cost or no pass rate, said below the chart instead of drawn at 0
    width: float
    height: float
    left: float = SCATTER_LEFT
    top: float = SCATTER_TOP
    bottom: float = SCATTER_TOP + SCATTER_PLOT_H
    right: float = SCATTER_LEFT + SCATTER_PLOT_W


def _money(value: float, top: float) -> str:
    """A tick's amount with the decimals the axis needs: $0.00008 apart must not read as the same $0.0001."""
    if top >= 1:
        return f"${value:,.2f}"
    decimals = max(2, 1 - math.floor(math.log10(top / 4)))
    return f"${value:.{decimals}f}"


def cost_against_pass_rate(by_model: Sequence[Mapping[str, Any]]) -> Scatter:
    """Cost on x (from 0), pass rate on y (0-100 %), a point per model and mode; better is up and to the left."""
    drawable = [r for r in by_model if r.get("costUsd") is not None and r.get("passRate") is not None]
    unplotted = [
        f"{_label(r)}: " + ("no scored run" if r.get("passRate") is None else "cost unknown")
        for r in by_model
        if r not in drawable
    ]
    top_cost = max((float(r["costUsd"]) for r in drawable), default=0.0) or 1.0
    top_cost *= 1.1  # the costliest point is not drawn on the frame's edge

    def x_of(cost: float) -> float:
        return SCATTER_LEFT + SCATTER_PLOT_W * cost / top_cost

    def y_of(rate: float) -> float:
        return SCATTER_TOP + SCATTER_PLOT_H * (1 - min(1.0, max(0.0, rate)))

    points: list[Point] = []
    for r in drawable:
        x, y = x_of(float(r["costUsd"])), y_of(float(r["passRate"]))
        near = sum(1 for p in points if abs(p.x - x) < 40 and abs(p.y - y) < 8)
        points.append(Point(_label(r), x, y, y + 4 + LABEL_STEP * near, float(r["costUsd"]), float(r["passRate"]),
                            str(r["testMode"])))  # fmt: skip
    x_ticks = [Tick(x_of(top_cost * i / 4), _money(top_cost * i / 4, top_cost)) for i in range(5)]
    y_ticks = [Tick(y_of(i / 4), f"{i * 25}%") for i in range(5)]
    height = SCATTER_TOP + SCATTER_PLOT_H + 36
    return Scatter(points, x_ticks, y_ticks, unplotted, SCATTER_LEFT + SCATTER_PLOT_W + 150, height)
