"""JSON text for what Vouch writes and reads itself: the database's JSON columns, the bus's messages and the chat's
Redis copies. orjson, which encodes and decodes an agent step's state and events several times faster than the
standard library (issue 25: ~0.45 ms of CPU per approval went to `json`), with the standard library behind it for
what orjson refuses and `json` takes: integers past 64 bits and lone surrogates written, NaN and Infinity read.
NaN and Infinity are written as null, as JSON has no such numbers (PostgreSQL refuses `json`'s `NaN`)."""

from __future__ import annotations

import json
from typing import Any

import orjson

# Keys that are not strings (an int, say) become strings, as `json.dumps` makes them.
_OPTIONS = orjson.OPT_NON_STR_KEYS


def dumps(value: Any) -> str:
    """`value` as compact JSON text."""
    try:
        return orjson.dumps(value, option=_OPTIONS).decode()
    except TypeError:  # orjson.JSONEncodeError
        return json.dumps(value, separators=(",", ":"))


def loads(text: str | bytes) -> Any:
    """The value of JSON text."""
    try:
        return orjson.loads(text)
    except ValueError:  # orjson.JSONDecodeError
        return json.loads(text)
