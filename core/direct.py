"""The hot paths' Core statements, run in the session's transaction through SQLAlchemy's Connection.

Callers build a statement once (`DirectStatement`, with bind parameters) and run a batch of them, with their
parameters, on the session's connection inside one greenlet (`run_direct`): SQLAlchemy's compiled cache keeps
each statement's SQL, and an executemany of an INSERT goes out as `insertmanyvalues` batches. (Until issue 21
these statements were compiled by hand and written to the DBAPI cursor, bypassing SQLAlchemy's execution layer;
the bench's alternating pairs showed no user-visible figure it moved by 30 %: bench/README.md.)
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

import sqlalchemy as sa
from sqlalchemy.engine import Connection
from sqlalchemy.ext.asyncio import AsyncSession

T = TypeVar("T")


class DirectStatement:
    """A Core statement for `run_direct`, built once."""

    def __init__(self, statement: sa.Insert | sa.Update | sa.Delete | sa.Select[Any]) -> None:
        self.statement = statement


class DirectCursor:
    """Runs `DirectStatement`s on the session's connection; errors come out as SQLAlchemy's (IntegrityError, …)."""

    def __init__(self, connection: Connection) -> None:
        self._connection = connection

    def execute(self, statement: DirectStatement, parameters: Mapping[str, Any]) -> list[tuple[Any, ...]]:
        """The rows it returned (a SELECT's, a RETURNING's), or none."""
        result = self._connection.execute(statement.statement, dict(parameters))
        return [tuple(row) for row in result] if result.returns_rows else []

    def executemany(self, statement: DirectStatement, rows: Sequence[Mapping[str, Any]]) -> None:
        if rows:
            self._connection.execute(statement.statement, [dict(row) for row in rows])


async def run_direct(session: AsyncSession, work: Callable[[DirectCursor], T]) -> T:
    """Run `work` on the session's connection, in its transaction (begun here if need be), in one greenlet."""
    connection = await session.connection()
    return await connection.run_sync(lambda sync: work(DirectCursor(sync)))
