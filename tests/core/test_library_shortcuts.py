"""What core/_sqlalchemy_shortcuts.py and core/_aiosqlite_shortcuts.py rely on in SQLAlchemy and aiosqlite (each
module's text lists it): these fail when a new version of either library changes it, before the durable core
does. pyproject.toml caps both libraries below their next minor version for these modules."""

from __future__ import annotations

import inspect
import sqlite3
import threading
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import aiosqlite
import pytest
import sqlalchemy as sa
from aiosqlite.cursor import Cursor as AiosqliteCursor
from sqlalchemy import event, exc
from sqlalchemy.connectors.asyncio import AsyncAdapt_dbapi_connection, AsyncAdapt_dbapi_cursor
from sqlalchemy.dialects.sqlite.aiosqlite import (
    AsyncAdapt_aiosqlite_connection,
    AsyncAdapt_aiosqlite_cursor,
    AsyncAdapt_aiosqlite_dbapi,
)
from sqlalchemy.ext.asyncio import AsyncConnection
from sqlalchemy.ext.asyncio import result as async_result
from sqlalchemy.sql.compiler import SQLCompiler

from core._aiosqlite_shortcuts import LoopConnection, open_loop_connection
from core._sqlalchemy_shortcuts import DirectStatement, InlineDBAPI, inline_connection, run_alone, run_direct
from core.bus import InProcessBus
from core.db import Database
from core.models import UTCDateTime

METADATA = sa.MetaData()
NOTES = sa.Table(
    "shortcut_notes",
    METADATA,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=False),
    sa.Column("doc", sa.JSON, nullable=False),
    sa.Column("at", UTCDateTime, nullable=False),
    sa.Column("kind", sa.Text, nullable=False),
    sa.Column("stamped", sa.Text, default=lambda: "by SQLAlchemy"),
)
AT = datetime(2024, 5, 6, 7, 8, 9, tzinfo=UTC)


@pytest.fixture
async def notes_db(db: Database) -> AsyncIterator[Database]:
    async with db.engine.begin() as connection:
        await connection.run_sync(METADATA.create_all)
    yield db


# SQLAlchemy: compiled statements


async def test_a_direct_statement_sends_the_sql_and_values_sqlalchemy_itself_sends(notes_db: Database) -> None:
    """Positional binds in the driver's order, each through the processor `Connection.execute` applies (JSON,
    the aware-datetime type), and a value the statement holds itself."""
    statement = sa.insert(NOTES).values(kind="fixed")
    row = {"id": 1, "doc": {"a": [1, "b"]}, "at": AT, "stamped": "given"}
    sent: list[tuple[str, Any]] = []

    def record(conn: Any, cursor: Any, sql: str, parameters: Any, context: Any, executemany: bool) -> None:
        sent.append((sql, parameters))

    event.listen(notes_db.engine.sync_engine, "before_cursor_execute", record)
    try:
        async with notes_db.transaction() as session:
            await session.execute(statement, row)
    finally:
        event.remove(notes_db.engine.sync_engine, "before_cursor_execute", record)
    compiled = DirectStatement(statement).compiled_for(notes_db.engine.dialect, tuple(row))
    assert [(compiled.sql, tuple(compiled.values(row)))] == [(sql, tuple(values)) for sql, values in sent]

    # And the row the direct path writes reads back as SQLAlchemy's did.
    async with notes_db.transaction() as session:
        await run_direct(session, lambda cursor: cursor.execute(DirectStatement(statement), {**row, "id": 2}))
    async with notes_db.reading() as session:
        rows = (await session.execute(sa.select(NOTES.c.doc, NOTES.c.at, NOTES.c.kind).order_by(NOTES.c.id))).all()
    assert [tuple(r) for r in rows] == [({"a": [1, "b"]}, AT, "fixed")] * 2


@pytest.mark.parametrize("dialect_name", ["sqlite", "postgresql"])
def test_the_compiler_exposes_binds_processors_and_what_the_execution_context_would_fill(dialect_name: str) -> None:
    dialect = (
        sa.dialects.sqlite.aiosqlite.dialect() if dialect_name == "sqlite" else sa.dialects.postgresql.asyncpg.dialect()
    )
    compiled = sa.insert(NOTES).values(kind="fixed").compile(dialect=dialect, column_keys=["id", "doc", "at"])
    assert isinstance(compiled, SQLCompiler)
    assert list(compiled.positiontup or ()) == ["id", "doc", "at", "kind", "stamped"]
    assert (compiled.binds["id"].required, compiled.binds["kind"].required) == (True, False)
    assert compiled.binds["kind"].effective_value == "fixed"
    processors = compiled._bind_processors
    # SQLite keeps the text of the UTC time (core/models.py's UTCDateTime, then SQLite's DATETIME).
    assert processors["at"](AT) == (AT if dialect_name == "postgresql" else "2024-05-06 07:08:09.000000")
    with pytest.raises(ValueError, match="naive"):
        processors["at"](AT.replace(tzinfo=None))
    # `stamped` was left out: its Python default is the execution context's to fill in.
    assert [column.key for column in compiled.insert_prefetch] == ["stamped"]
    assert compiled.update_prefetch == []
    assert compiled.literal_execute_params == frozenset()
    with pytest.raises(ValueError, match="execution context"):
        DirectStatement(sa.insert(NOTES)).compiled_for(dialect, ("id", "doc", "at", "kind"))
    literal = sa.select(NOTES.c.id).where(NOTES.c.id.in_(sa.bindparam("ids", literal_execute=True, expanding=True)))
    assert literal.compile(dialect=dialect).literal_execute_params


@pytest.mark.parametrize("dialect_name", ["sqlite", "postgresql"])
def test_a_parameter_named_like_a_column_sets_it_unless_the_statement_names_its_values(dialect_name: str) -> None:
    """As `Connection.execute` (SQLAlchemy's `column_keys`), a parameter named like a column the statement writes
    sets that column too; compiled without column keys (`sets_from_parameters=False`), only its own values."""
    dialect = (
        sa.dialects.sqlite.aiosqlite.dialect() if dialect_name == "sqlite" else sa.dialects.postgresql.asyncpg.dialect()
    )
    statement = sa.update(NOTES).where(NOTES.c.id == sa.bindparam("wanted")).values(kind=sa.bindparam("new_kind"))
    names = ("wanted", "new_kind", "doc")
    as_execute = DirectStatement(statement).compiled_for(dialect, names)
    assert [name for name, _, _ in as_execute.slots] == ["doc", "new_kind", "wanted"]  # in the table's order
    named = DirectStatement(statement, sets_from_parameters=False).compiled_for(dialect, names)
    assert [name for name, _, _ in named.slots] == ["new_kind", "wanted"]
    assert "doc" not in named.sql


async def test_a_drivers_error_comes_out_as_sqlalchemys_class_for_it(notes_db: Database) -> None:
    row = {"id": 1, "doc": {}, "at": AT, "kind": "k", "stamped": "s"}
    insert = DirectStatement(sa.insert(NOTES))
    async with notes_db.transaction() as session:
        await run_direct(session, lambda cursor: cursor.execute(insert, row))
    with pytest.raises(exc.IntegrityError) as raised:
        async with notes_db.transaction() as session:
            await run_direct(session, lambda cursor: cursor.execute(insert, row))
    assert isinstance(raised.value.orig, notes_db.engine.dialect.loaded_dbapi.Error)
    assert list(inspect.signature(exc.DBAPIError.instance).parameters)[:5] == [
        "statement",
        "params",
        "orig",
        "dbapi_base_err",
        "hide_parameters",
    ]


async def test_a_statement_alone_commits_by_itself_and_fails_as_sqlalchemy_would(notes_db: Database) -> None:
    """PostgreSQL: `run_alone` runs a direct statement's SQL and values on a connection in autocommit
    (`exec_driver_sql`); SQLite writes in transactions only."""
    row = {"id": 1, "doc": {"a": [1, "b"]}, "at": AT, "kind": "k", "stamped": "s"}
    insert = DirectStatement(sa.insert(NOTES).returning(NOTES.c.id))
    if not notes_db.backend.writes_alone:
        with pytest.raises(RuntimeError, match="transactions only"):
            async with notes_db.alone():
                pass
        return
    async with notes_db.alone() as alone:
        assert await run_alone(alone.connection, insert, row) == [(1,)]
        # Committed already: another connection sees it while this one is still out of the pool.
        async with notes_db.reading() as session:
            found = (await session.execute(sa.select(NOTES.c.doc, NOTES.c.at, NOTES.c.kind))).all()
        assert [tuple(r) for r in found] == [({"a": [1, "b"]}, AT, "k")]
        with pytest.raises(exc.IntegrityError) as raised:
            await run_alone(alone.connection, insert, row)
        assert isinstance(raised.value.orig, notes_db.engine.dialect.loaded_dbapi.Error)
        # The connection goes on after the error: nothing was left open on it.
        assert await run_alone(alone.connection, insert, {**row, "id": 2}) == [(2,)]
    async with notes_db.engine.connect() as connection:  # in a transaction, as SQLAlchemy's connections are
        with pytest.raises(ValueError, match="autocommit"):
            await run_alone(connection, insert, {**row, "id": 3})


# SQLAlchemy: the aiosqlite adapter


def test_the_aiosqlite_adapter_makes_its_cursor_through_two_hooks_and_its_connections_cursor_class() -> None:
    init = inspect.getsource(AsyncAdapt_dbapi_cursor.__init__)
    assert "self._make_new_cursor(self._connection)" in init and "self._aenter_cursor(cursor)" in init
    assert "self._cursor_cls(self)" in inspect.getsource(AsyncAdapt_dbapi_connection.cursor)
    assert AsyncAdapt_aiosqlite_connection._cursor_cls is AsyncAdapt_aiosqlite_cursor
    slots = {slot for klass in AsyncAdapt_aiosqlite_cursor.__mro__ for slot in getattr(klass, "__slots__", ())}
    assert {"_adapt_connection", "_connection", "_cursor", "_rows", "_soft_closed_memoized"} <= slots
    assert inspect.iscoroutinefunction(AsyncAdapt_aiosqlite_cursor._async_soft_close)
    # The asyncio extension soft-closes a cursor (memoizing its description) before its rows are read.
    assert "cursor._async_soft_close()" in inspect.getsource(async_result)
    assert "_soft_closed_memoized" in inspect.getsource(AsyncAdapt_dbapi_cursor.description.fget)  # type: ignore[attr-defined]
    assert list(inspect.signature(AsyncAdapt_aiosqlite_connection._handle_exception).parameters) == ["self", "error"]
    connect = inspect.getsource(AsyncAdapt_aiosqlite_dbapi.connect)
    assert 'kw.pop("async_creator_fn"' in connect
    assert "_connection" in AsyncAdapt_dbapi_connection.__init__.__code__.co_names


async def test_an_sqlite_write_transaction_uses_the_sqlite3_cursor_inline(tmp_path: Path) -> None:
    database = Database(f"sqlite+aiosqlite:///{tmp_path / 'inline.sqlite3'}", InProcessBus())
    try:
        async with database.transaction() as session:
            await session.execute(sa.text("CREATE TABLE t (x INTEGER)"))
        async with database.reading() as session:
            connection = await session.connection()
            adapted = (await connection.get_raw_connection()).dbapi_connection
            assert type(adapted).__name__ == "_InlineConnection" and isinstance(adapted._connection, LoopConnection)
            assert inline_connection(connection.sync_connection) is None  # type: ignore[arg-type]
        async with database.transaction() as session:
            connection = await session.connection()
            raw = (await connection.get_raw_connection()).dbapi_connection
            cursor = raw.cursor()
            assert isinstance(cursor._cursor, sqlite3.Cursor)  # through the two hooks
            cursor.close()
            assert isinstance(inline_connection(connection.sync_connection), sqlite3.Connection)  # type: ignore[arg-type]
            await session.execute(sa.text("INSERT INTO t VALUES (1), (2)"))
            assert list(await session.scalars(sa.text("SELECT x FROM t ORDER BY x"))) == [1, 2]
            # A driver error inline still comes out as SQLAlchemy's, through the adapter's _handle_exception.
            with pytest.raises(exc.OperationalError, match="no such table"):
                await session.execute(sa.text("INSERT INTO nowhere VALUES (1)"))
    finally:
        await database.dispose()


def test_the_dialect_takes_our_dbapi_module_and_async_creator() -> None:
    assert issubclass(InlineDBAPI, AsyncAdapt_aiosqlite_dbapi)
    parameters = inspect.signature(sa.ext.asyncio.create_async_engine).parameters
    assert "url" in parameters
    assert "async_creator" in inspect.getsource(sa.ext.asyncio.engine)
    assert inspect.iscoroutinefunction(AsyncConnection.run_sync)
    assert sa.util.await_ is sa.util.await_only


# aiosqlite


async def test_every_aiosqlite_call_goes_through_its_connections_execute(tmp_path: Path) -> None:
    assert list(inspect.signature(aiosqlite.Connection.__init__).parameters)[:3] == [
        "self",
        "connector",
        "iter_chunk_size",
    ]
    assert inspect.iscoroutinefunction(aiosqlite.Connection._execute)
    assert "self._conn._execute(fn" in inspect.getsource(AiosqliteCursor._execute)

    connection = LoopConnection(lambda: sqlite3.connect(tmp_path / "a.sqlite3", check_same_thread=False), 64)
    assert (connection._running, connection._connection) == (True, None)
    with pytest.raises(ValueError):
        connection._conn  # noqa: B018  (raises without a connection)
    assert isinstance(connection._thread, threading.Thread)
    await connection
    assert isinstance(connection._connection, sqlite3.Connection) and connection._conn is connection._connection
    connection._conn.create_function("thread_id", 0, threading.get_ident)

    async def thread_of_a_statement() -> int:
        async with connection.execute("SELECT thread_id()") as cursor:
            row = await cursor.fetchone()
        assert row is not None
        return int(row[0])

    assert await thread_of_a_statement() == connection._thread.ident != threading.get_ident()
    connection.inline = True
    assert connection.runs_inline
    assert await thread_of_a_statement() == threading.get_ident()
    connection.inline = False
    await connection.close()
    assert connection._connection is None
    connection.inline = True
    assert not connection.runs_inline


async def test_a_loop_connection_is_connected_and_never_holds_up_exit(tmp_path: Path) -> None:
    connection = await open_loop_connection(lambda: sqlite3.connect(tmp_path / "b.sqlite3", check_same_thread=False))
    try:
        assert connection._thread.daemon and connection._thread.is_alive()
        assert isinstance(connection.sqlite3_connection, sqlite3.Connection)
    finally:
        await connection.close()
