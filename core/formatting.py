"""How times and durations read, in one place: the API's timestamps, the pages' durations and ages.

The client (vouch-client) keeps its own copy for the terminal: it may not import the server.
"""

from __future__ import annotations

import math
from datetime import datetime, timedelta
from typing import Any


def isoformat(moment: datetime | None) -> str | None:
    """A UTC time as the API writes it: ISO 8601 with milliseconds and a Z."""
    if moment is None:
        return None
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def clock(moment: datetime | str | None) -> str:
    """A UTC time of day for a server-rendered page."""
    if moment is None:
        return ""
    if isinstance(moment, str):
        moment = datetime.fromisoformat(moment.replace("Z", "+00:00"))
    return moment.strftime("%H:%M:%S UTC")


def duration(ms: Any) -> str:
    """Milliseconds as people read them: 840 ms, 3.2 s, 4 min 05 s, 2 h 03 min."""
    if ms is None:
        return "—"
    # Rounded half up, as static/js/chat-view.js rounds: the live page and a reload must read the same.
    value = float(ms)
    if value < 1000:
        return f"{math.floor(value + 0.5)} ms"
    seconds = value / 1000
    if seconds < 60:
        return f"{math.floor(seconds * 10 + 0.5) / 10:.1f} s"
    minutes, secs = divmod(int(seconds), 60)
    if minutes < 60:
        return f"{minutes} min {secs:02d} s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes:02d} min"


def age(elapsed: timedelta) -> str:
    """How long something has waited, to the minute: 3 min, 2 h 05 min, 3 days."""
    minutes = int(elapsed.total_seconds() // 60)
    if minutes < 60:
        return f"{minutes} min"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes:02d} min" if hours < 48 else f"{hours // 24} days"
