"""Every use of SQLAlchemy's internals, in one place: the hot paths' statements sent straight to the driver, in the
session's transaction, and SQLite's write transactions run on the sqlite3 cursor itself.

`Session.execute` spends several times longer in SQLAlchemy than in the database for the short statements of an
agent step: the ORM's execution context, the compiled cache's key, the result's metadata, a greenlet switch (on
SQLite about 0.3 ms a statement on this machine, most of a step: bench/README.md). A `DirectStatement` is compiled
once per dialect and set of columns, its parameters go through the same bind processors SQLAlchemy would apply
(JSON, aware datetimes), and `run_direct` runs a batch of them on a DBAPI cursor of the session's own connection:
the same SQL, values and transaction, without the layers between. On SQLite, inside a write transaction, that is
the sqlite3 cursor itself, called synchronously; elsewhere, SQLAlchemy's adapted cursor in one greenlet.
`run_alone` runs one outside any session, on a connection in autocommit, through SQLAlchemy's public
`exec_driver_sql` (Database.alone: a PostgreSQL step that is one statement).
For Core statements whose values are all given: a column with a Python-side default or onupdate that the caller
leaves out would be filled in by SQLAlchemy's execution context, which this skips, so it is refused.

The statements SQLAlchemy itself runs in a SQLite write transaction (the ORM's, Core's) take a shorter way too:
`InlineDBAPI` is the DBAPI module given to the aiosqlite dialect (`module=`, core/sqlite.py); its connections'
cursors, while the connection runs inline (core/_aiosqlite_shortcuts.py), use a sqlite3 cursor directly, with no
greenlet switch to open or close it and none for COMMIT.

Kept because alternating pairs show both buy more than 30 % (issue 21, bench/README.md): through
`Connection.execute` and aiosqlite's thread instead, SQLite's durable step went from 0.57 to 1.2 ms and
create → first step from 2.9 to 4.7 ms.

What it relies on, as read in SQLAlchemy 2.1.9 (pyproject.toml caps it below 2.2 for this module; read this code
again before widening the range), each pinned by tests/core/test_library_shortcuts.py:

- `ClauseElement.compile(dialect=, column_keys=)` (None: only the values the statement names are set) gives a
  `SQLCompiler` with `positiontup` (bind names in the driver's order), `binds` (name → `BindParameter`, with
  `required` and `effective_value`), `_bind_processors` (name → the processor `Connection.execute` would apply),
  `insert_prefetch` / `update_prefetch` (columns the execution context would fill in) and
  `literal_execute_params`; `dialect.loaded_dbapi`;
  `DBAPIError.instance(statement, params, orig, dbapi_base_err, dialect=)`, which maps a driver's error to
  SQLAlchemy's class for it (IntegrityError, …);
- `sqlalchemy.dialects.sqlite.aiosqlite`: `AsyncAdapt_aiosqlite_dbapi.connect(*args, async_creator_fn=…)` (what
  `create_async_engine(async_creator=)` calls), `AsyncAdapt_aiosqlite_connection(dbapi, connection)` with
  `_connection` (the aiosqlite connection), `_cursor_cls` (the cursor class its `cursor()` makes) and
  `_handle_exception`; `AsyncAdapt_aiosqlite_cursor`'s hooks `_make_new_cursor(connection)` and
  `_aenter_cursor(cursor)` (called by its `__init__`), its slots `_cursor`, `_rows`, `_soft_closed_memoized`,
  `_adapt_connection`, and `_async_soft_close` (awaited by the asyncio extension before a result is read);
- `sqlalchemy.util.await_` (2.1's name; `await_only` is deprecated in 2.2), which runs a coroutine from inside
  SQLAlchemy's greenlet.
"""

from __future__ import annotations

import collections
import sqlite3
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import sqlalchemy as sa
from sqlalchemy import exc
from sqlalchemy.dialects.sqlite.aiosqlite import (
    AsyncAdapt_aiosqlite_connection,
    AsyncAdapt_aiosqlite_cursor,
    AsyncAdapt_aiosqlite_dbapi,
)
from sqlalchemy.engine import Connection, Dialect
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncSession
from sqlalchemy.sql.compiler import SQLCompiler
from sqlalchemy.util import await_

from core._aiosqlite_shortcuts import LoopConnection

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

    def __init__(
        self, statement: sa.Insert | sa.Update | sa.Delete | sa.Select[Any], *, sets_from_parameters: bool = True
    ) -> None:
        """`sets_from_parameters`: as `Connection.execute` does, a parameter named like a column of a table the
        statement writes (its own, or a data-modifying CTE's) sets that column (SQLAlchemy's `column_keys`). False
        for a statement that names every value it sets: its parameters then only fill its bind parameters, and
        one named `execution_id` does not set the column of that name of every table it updates."""
        self.statement = statement
        self.sets_from_parameters = sets_from_parameters
        self._compiled: dict[tuple[str, tuple[str, ...]], _Compiled] = {}

    def compiled_for(self, dialect: Dialect, columns: tuple[str, ...]) -> _Compiled:
        key = (dialect.name, columns)
        found = self._compiled.get(key)
        if found is not None:
            return found
        column_keys = list(columns) if self.sets_from_parameters else None
        compiled = self.statement.compile(dialect=dialect, column_keys=column_keys)
        if not isinstance(compiled, SQLCompiler) or compiled.positiontup is None:
            raise ValueError(f"{dialect.name}: DirectStatement needs a positional DBAPI")
        expanding = any(bind.expanding for bind in compiled.binds.values())
        if compiled.insert_prefetch or compiled.update_prefetch or compiled.literal_execute_params or expanding:
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
    """Run `work` with a cursor of the session's connection, in its transaction (begun here if need be): one
    greenlet for both, where asking for the connection first and then running on it were two."""
    return await session.run_sync(lambda sync_session: _on_connection(sync_session.connection(), work))


def _on_connection(sync: Connection, work: Callable[[DirectCursor], T]) -> T:
    inline = inline_connection(sync)
    cursor = inline.cursor() if inline is not None else sync.connection.dbapi_connection.cursor()  # type: ignore[union-attr]
    return _with_cursor(cursor, sync.dialect, work)


async def run_alone(
    connection: AsyncConnection, statement: DirectStatement, parameters: Mapping[str, Any]
) -> list[tuple[Any, ...]]:
    """Run `statement` on `connection`, in autocommit: it commits by itself. What it returned, as
    `DirectCursor.execute` gives it. Through `exec_driver_sql`, SQLAlchemy's own way in for SQL it did not build
    at the time: its errors, and a lost connection's invalidation, are SQLAlchemy's."""
    sync = connection.sync_connection
    if sync is None or sync.get_execution_options().get("isolation_level") != "AUTOCOMMIT":
        raise ValueError("run_alone needs a connection in autocommit")
    compiled = statement.compiled_for(connection.dialect, tuple(parameters))
    result = await connection.exec_driver_sql(compiled.sql, compiled.values(parameters))
    return [tuple(row) for row in result] if result.returns_rows else []


def _with_cursor(cursor: Any, dialect: Dialect, work: Callable[[DirectCursor], T]) -> T:
    try:
        return work(DirectCursor(cursor, dialect))
    finally:
        cursor.close()


class _InlineCursor(AsyncAdapt_aiosqlite_cursor):
    """SQLAlchemy's cursor over aiosqlite, which, while its connection runs inline, uses a sqlite3 cursor directly.

    SQLAlchemy's adapter reaches the driver through `await_`: a greenlet switch and aiosqlite's coroutines for
    opening the cursor, for the statement (behind an asyncio lock) and for closing it, even when each call then
    runs inline. Inline there is nothing to wait for: the cursor is opened and closed where SQLAlchemy asks, and
    the statement and its rows are one coroutine with no lock.
    """

    __slots__ = ()

    def _make_new_cursor(self, connection: Any) -> Any:
        if isinstance(connection, LoopConnection) and connection.runs_inline:
            return connection.sqlite3_connection.cursor()
        return super()._make_new_cursor(connection)

    def _aenter_cursor(self, cursor: Any) -> Any:
        return cursor if isinstance(cursor, sqlite3.Cursor) else super()._aenter_cursor(cursor)

    def execute(self, operation: Any, parameters: Any = None) -> Any:
        if not isinstance(self._cursor, sqlite3.Cursor):
            return super().execute(operation, parameters)
        try:
            # Still one await: SQLAlchemy's AsyncConnection.execute insists that a statement awaited something.
            return await_(self._inline(self._cursor, False, operation, () if parameters is None else parameters))
        except Exception as error:
            self._adapt_connection._handle_exception(error)

    def executemany(self, operation: Any, seq_of_parameters: Any) -> Any:
        if not isinstance(self._cursor, sqlite3.Cursor):
            return super().executemany(operation, seq_of_parameters)
        try:
            return await_(self._inline(self._cursor, True, operation, seq_of_parameters))
        except Exception as error:
            self._adapt_connection._handle_exception(error)

    async def _inline(self, cursor: sqlite3.Cursor, many: bool, operation: str, parameters: Any) -> Any:
        result = cursor.executemany(operation, parameters) if many else cursor.execute(operation, parameters)
        if cursor.description:
            self._rows = collections.deque(cursor.fetchall())
        return result

    async def _async_soft_close(self) -> None:
        cursor = self._cursor
        if not isinstance(cursor, sqlite3.Cursor):
            await super()._async_soft_close()
        elif not self._soft_closed_memoized:
            self._soft_closed_memoized = self._soft_closed_memoized.union({"description": cursor.description})
            cursor.close()

    def close(self) -> None:
        cursor = self._cursor
        if not isinstance(cursor, sqlite3.Cursor):
            super().close()
            return
        self._rows.clear()
        if not self._soft_closed_memoized:
            cursor.close()


class _InlineConnection(AsyncAdapt_aiosqlite_connection):
    """Its cursors are `_InlineCursor`s, and an inline COMMIT or ROLLBACK is called directly too."""

    __slots__ = ()
    _cursor_cls = _InlineCursor

    def commit(self) -> None:
        self._end_transaction("commit")

    def rollback(self) -> None:
        self._end_transaction("rollback")

    def _end_transaction(self, how: str) -> None:
        connection = self._connection
        if not (isinstance(connection, LoopConnection) and connection.runs_inline):
            getattr(super(), how)()
            return
        try:
            getattr(connection.sqlite3_connection, how)()
        except Exception as error:
            self._handle_exception(error)


class InlineDBAPI(AsyncAdapt_aiosqlite_dbapi):
    """The DBAPI module SQLAlchemy's aiosqlite dialect is given (`module=`): it hands out `_InlineConnection`s."""

    def connect(self, *args: Any, **kwargs: Any) -> _InlineConnection:
        creator = kwargs.pop("async_creator_fn")
        return _InlineConnection(self, await_(creator(*args, **kwargs)))


def inline_connection(connection: Connection) -> sqlite3.Connection | None:
    """The sqlite3 connection under `connection` while its write transaction runs inline on the loop's thread:
    statements may then be sent to it directly, without a greenlet or a thread hand-off. None otherwise."""
    adapted = connection.connection.dbapi_connection
    driver = adapted._connection if isinstance(adapted, _InlineConnection) else None
    if isinstance(driver, LoopConnection) and driver.runs_inline:
        return driver.sqlite3_connection
    return None
