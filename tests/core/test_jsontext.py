"""core/jsontext.py: orjson where it can, the standard library where orjson refuses what `json` takes; the same
values come back, through the text and through the database's JSON columns, on both databases."""

from __future__ import annotations

import json
import math
from typing import Any

from core import jsontext
from core.db import Database
from core.events import append_any_event, events_after
from core.settings import Settings
from tests.core.test_events import new_executions

# What orjson alone refuses: integers past 64 bits, NaN, a lone surrogate (e.g. from a model's broken output).
BEYOND_ORJSON: dict[str, Any] = {"big": 2**70, "negative": -(2**65), "surrogate": "a\ud800b"}
PLAIN: dict[str, Any] = {"text": "déjà vu ✓", "n": 2**63 - 1, "x": 0.1, "list": [1, None, True], "nested": {"a": {}}}


def test_plain_values_come_back_and_the_text_is_json() -> None:
    text = jsontext.dumps(PLAIN)
    assert json.loads(text) == PLAIN
    assert jsontext.loads(text) == PLAIN
    assert jsontext.loads(text.encode()) == PLAIN


def test_what_orjson_refuses_goes_through_the_standard_library() -> None:
    text = jsontext.dumps(BEYOND_ORJSON)
    assert json.loads(text) == BEYOND_ORJSON
    assert jsontext.loads(text) == BEYOND_ORJSON


def test_nan_is_written_as_null_and_read_as_written_before() -> None:
    # JSON has no NaN (PostgreSQL refuses the text `NaN` in a JSON column): null is written. A row that `json`
    # wrote with NaN (SQLite took it) still reads.
    assert jsontext.dumps({"nan": math.nan, "inf": math.inf}) == '{"nan":null,"inf":null}'
    assert math.isnan(jsontext.loads('{"x": NaN}')["x"])


def test_keys_that_are_not_strings_become_strings_as_json_makes_them() -> None:
    assert jsontext.loads(jsontext.dumps({1: "a", 2.5: "b"})) == json.loads(json.dumps({1: "a", 2.5: "b"}))


def test_a_value_neither_library_knows_is_refused() -> None:
    try:
        jsontext.dumps({"set": {1, 2}})
    except TypeError:
        return
    raise AssertionError("a set was encoded")


async def test_the_database_json_columns_keep_every_value(db: Database, settings: Settings) -> None:
    (execution_id,) = await new_executions(db, settings, 1)
    async with db.transaction() as session:
        await append_any_event(session, execution_id, "test.plain", PLAIN)
        await append_any_event(session, execution_id, "test.beyond", BEYOND_ORJSON)
    async with db.reading() as session:
        payloads = {e.type: e.payload for e in await events_after(session, execution_id)}
    assert payloads["test.plain"] == PLAIN
    assert payloads["test.beyond"] == BEYOND_ORJSON
