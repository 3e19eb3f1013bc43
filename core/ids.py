"""Identifiers: time-ordered, unguessable, with a prefix that says what they name."""

from __future__ import annotations

import secrets
import time

_CROCKFORD = "0123456789abcdefghjkmnpqrstvwxyz"


def new_id(prefix: str) -> str:
    """`prefix_` + 10 characters of millisecond time + 16 random characters (80 bits).

    Time first keeps B-tree inserts local and lets ids sort by creation.
    """
    millis = time.time_ns() // 1_000_000
    stamp = "".join(_CROCKFORD[(millis >> shift) & 31] for shift in range(45, -1, -5))
    rand = "".join(secrets.choice(_CROCKFORD) for _ in range(16))
    return f"{prefix}_{stamp}{rand}"
