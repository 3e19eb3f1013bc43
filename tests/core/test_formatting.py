"""The one place times and durations are formatted (core/formatting.py)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from core.formatting import age, clock, duration, isoformat


def test_times() -> None:
    moment = datetime(2026, 1, 2, 3, 4, 5, 678901, tzinfo=UTC)
    assert isoformat(moment) == "2026-01-02T03:04:05.678Z"
    assert isoformat(None) is None
    assert clock(moment) == clock("2026-01-02T03:04:05.678Z") == "03:04:05 UTC"


def test_durations() -> None:
    assert [duration(ms) for ms in (None, 839.5, 3249, 245_000, 7_380_000)] == [
        "—",
        "840 ms",
        "3.2 s",
        "4 min 05 s",
        "2 h 03 min",
    ]
    assert [age(timedelta(minutes=m)) for m in (3, 125, 3 * 24 * 60)] == ["3 min", "2 h 05 min", "3 days"]
