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
    # One draw of 80 bits, not 16 choices: ids are made on every agent step.
    value = (millis << 80) | int.from_bytes(secrets.token_bytes(10))
    return prefix + "_" + "".join(_CROCKFORD[(value >> shift) & 31] for shift in range(125, -1, -5))
