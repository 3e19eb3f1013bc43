"""Statements of the hot paths sent straight to the driver, in the session's transaction.

`Session.execute` spends several times longer in SQLAlchemy than in the database for the short statements of an
agent step: the ORM's execution context, the compiled cache's key, the result's metadata, a greenlet switch (on
SQLite about 0.3 ms a statement on this machine, most of a step: bench/README.md). A `DirectStatement` is compiled
once per dialect and set of columns, its parameters go through the same bind processors SQLAlchemy would apply
(JSON, aware datetimes), and `run_direct` runs a batch of them on a DBAPI cursor of the session's own connection:
the same SQL, values and transaction, without the layers between. On SQLite, inside a write transaction, that is
the sqlite3 cursor itself, called synchronously; elsewhere, SQLAlchemy's adapted cursor in one greenlet.
Issue 21 measured the alternative, `Connection.execute` (and aiosqlite's thread per statement): SQLite's durable
step went from 0.6 to 1.2 ms and create → first step from 2.9 to 4.7 ms, so this stays (bench/README.md).

For Core statements whose values are all given: a column with a Python-side default or onupdate that the caller
leaves out would be filled in by SQLAlchemy's execution context, which this skips, so it is refused.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import sqlalchemy as sa
from sqlalchemy import exc
from sqlalchemy.engine import Dialect
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.sql.compiler import SQLCompiler

from core.sqlite import inline_connection

T = TypeVar("T")

_MISSING = object()


@dataclass(frozen=True)
class _Compiled:
    sql: str
    # For each parameter, in the order the driver takes them (both dialects here are positional): its name, its
    # bind processor, and the value the statement itself holds for it (a literal in `.values()`), if any.
    slots: tuple[tuple[str, Callable[[Any], Any] | None, Any], ...]

    def values(self, parameters: Mapping[str, Any]) -> tuple[Any, ...]:
        out = []
        for name, process, fixed in self.slots:
            value = parameters.get(name, fixed)
            if value is _MISSING:
                raise exc.ArgumentError(f"no value for bind parameter {name!r}")
            out.append(process(value) if process is not None else value)
        return tuple(out)


class DirectStatement:
    """A Core statement for `run_direct` (see the module's text)."""

    def __init__(self, statement: sa.Insert | sa.Update | sa.Delete | sa.Select[Any]) -> None:
        self.statement = statement
        self._compiled: dict[tuple[str, tuple[str, ...]], _Compiled] = {}

    def compiled_for(self, dialect: Dialect, columns: tuple[str, ...]) -> _Compiled:
        key = (dialect.name, columns)
        found = self._compiled.get(key)
        if found is not None:
            return found
        compiled = self.statement.compile(dialect=dialect, column_keys=list(columns))
        if not isinstance(compiled, SQLCompiler) or compiled.positiontup is None:
            raise ValueError(f"{dialect.name}: DirectStatement needs a positional DBAPI")
        if compiled.insert_prefetch or compiled.update_prefetch or compiled.literal_execute_params:
            raise ValueError(f"{self.statement!r} needs SQLAlchemy's execution context: give every value")
        processors = compiled._bind_processors
        slots = []
        for name in compiled.positiontup:
            bind = compiled.binds[name]
            process = processors.get(name)
            if process is not None and not callable(process):
                raise ValueError(f"{name}: tuple-typed parameters are not supported")
            slots.append((name, process, _MISSING if bind.required else bind.effective_value))
        made = _Compiled(compiled.string, tuple(slots))
        self._compiled[key] = made
        return made


class DirectCursor:
    """Runs `DirectStatement`s on one DBAPI cursor; DBAPI errors come out as SQLAlchemy's (IntegrityError, …)."""

    def __init__(self, cursor: Any, dialect: Dialect) -> None:
        self._cursor = cursor
        self._dialect = dialect

    def execute(self, statement: DirectStatement, parameters: Mapping[str, Any]) -> list[tuple[Any, ...]]:
        """The rows it returned (a SELECT's, a RETURNING's), or none: values as the driver gives them, which no
        result processor has seen (fine for ids, counts and text; not for JSON or aware datetimes on SQLite)."""
        compiled = statement.compiled_for(self._dialect, tuple(parameters))
        values = compiled.values(parameters)
        cursor = self._cursor
        try:
            cursor.execute(compiled.sql, values)
            return [tuple(row) for row in cursor.fetchall()] if cursor.description else []
        except self._dialect.loaded_dbapi.Error as error:
            raise self._wrapped(compiled.sql, values, error) from error

    def executemany(self, statement: DirectStatement, rows: Sequence[Mapping[str, Any]]) -> None:
        if not rows:
            return
        compiled = statement.compiled_for(self._dialect, tuple(rows[0]))
        values = [compiled.values(row) for row in rows]
        try:
            self._cursor.executemany(compiled.sql, values)
        except self._dialect.loaded_dbapi.Error as error:
            raise self._wrapped(compiled.sql, values, error) from error

    def _wrapped(self, sql: str, values: Any, error: Exception) -> exc.StatementError:
        dialect = self._dialect
        return exc.DBAPIError.instance(sql, values, error, dialect.loaded_dbapi.Error, dialect=dialect)


async def run_direct(session: AsyncSession, work: Callable[[DirectCursor], T]) -> T:
    """Run `work` with a cursor of the session's connection, in its transaction (begun here if need be)."""
    connection = await session.connection()
    sync = connection.sync_connection
    assert sync is not None
    inline = inline_connection(sync)
    if inline is not None:
        return _with_cursor(inline.cursor(), sync.dialect, work)
    return await connection.run_sync(
        lambda sync: _with_cursor(sync.connection.dbapi_connection.cursor(), sync.dialect, work)  # type: ignore[union-attr]
    )


def _with_cursor(cursor: Any, dialect: Dialect, work: Callable[[DirectCursor], T]) -> T:
    try:
        return work(DirectCursor(cursor, dialect))
    finally:
        cursor.close()
