"""SQL helpers shared by the database layer and the backends (core/backends), below both."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa


def one_of(column: sa.ColumnElement[Any], constants: Sequence[str]) -> sa.ColumnElement[bool]:
    """`column IN (constants)` with the constants written into the SQL. A plain `in_` renders its list again at
    every execution (an expanding parameter), which costs more than the statement it is part of on a hot path;
    this one's SQL is cached whole. Only for our own constants: they are quoted here, not bound."""
    if any("'" in constant for constant in constants):
        raise ValueError("one_of takes plain constants")
    return column.in_([sa.literal_column(f"'{constant}'") for constant in constants])
