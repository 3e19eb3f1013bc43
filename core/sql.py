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


def equals_by_row(column: sa.ColumnElement[Any], constant: str) -> sa.ColumnElement[bool]:
    """`column = constant` for a NOT NULL column, in a statement that finds its row by primary key, written so that it
    is no index condition (through coalesce: the same test). The generic plan PostgreSQL uses for a prepared statement
    from its sixth run on, on a table not analyzed since a burst of new rows, otherwise took the row through an index
    on `column` (ix_executions_claim, by status) and filtered every entry with that value by the key (issue 25)."""
    return sa.func.coalesce(column, "") == constant
