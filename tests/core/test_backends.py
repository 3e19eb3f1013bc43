"""What differs between SQLite and PostgreSQL lives in core/backends, one module per database behind one
interface: no feature module tests which database it runs on, and every session reaches its database's backend."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncSession

from core.backends import backend_for, backend_of
from core.db import Database

ROOT = Path(__file__).resolve().parents[2]
FEATURE_PACKAGES = ("agents", "api", "chat", "review", "core")
# Where the database may be named, and why.
ALLOWED = {
    "core/backends": "the backends themselves",
    "core/migrations": "Alembic scripts, each run against the one database it migrates",
}
DIALECT_NAMES = {"sqlite", "postgresql"}


def _mentions_dialect(node: ast.AST) -> bool:
    for inner in ast.walk(node):
        if isinstance(inner, ast.Name) and "dialect" in inner.id.lower():
            return True
        if isinstance(inner, ast.Attribute) and "dialect" in inner.attr.lower():
            return True
        if isinstance(inner, ast.Compare):
            operands = [inner.left, *inner.comparators]
            if any(isinstance(operand, ast.Constant) and operand.value in DIALECT_NAMES for operand in operands):
                return True
    return False


def dialect_branches(source: str) -> list[int]:
    """Lines of `source` that choose by database: a condition naming the dialect or comparing with a dialect's
    name, or a table keyed by dialect names. (A URL's scheme, read to make the engine, is not a dialect.)"""
    found = []
    for node in ast.walk(ast.parse(source)):
        tests: list[ast.AST] = []
        if isinstance(node, ast.If | ast.IfExp | ast.While | ast.Assert):
            tests.append(node.test)
        elif isinstance(node, ast.comprehension):
            tests.extend(node.ifs)
        elif isinstance(node, ast.Match):
            tests.append(node.subject)
        elif isinstance(node, ast.Compare | ast.BoolOp):
            tests.append(node)
        keyed_by_dialect = isinstance(node, ast.Dict) and any(
            isinstance(key, ast.Constant) and key.value in DIALECT_NAMES for key in node.keys
        )
        if keyed_by_dialect or any(_mentions_dialect(test) for test in tests):
            found.append(node.lineno)  # type: ignore[attr-defined]
    return sorted(set(found))


def feature_modules() -> list[Path]:
    paths = [path for package in FEATURE_PACKAGES for path in sorted((ROOT / package).rglob("*.py"))]
    return [
        path
        for path in paths
        if not any(path.relative_to(ROOT).as_posix().startswith(allowed) for allowed in ALLOWED)
    ]


def test_the_check_sees_a_branch_on_the_dialect() -> None:
    source = """
if db.dialect == "postgresql":
    query = query.with_for_update(skip_locked=True)
name = "x" if session.get_bind().dialect.name != "sqlite" else "y"
STATEMENTS = {"sqlite": 1, "postgresql": 2}
"""
    assert dialect_branches(source) == [2, 4, 5]
    assert dialect_branches("query = backend.skip_locked(query)\nif url.startswith('sqlite'):\n    pass\n") == []


def test_no_feature_module_branches_on_the_dialect() -> None:
    modules = feature_modules()
    assert len(modules) > 50  # the scan found the packages
    branches = {
        f"{path.relative_to(ROOT)}:{line}": path.read_text().splitlines()[line - 1].strip()
        for path in modules
        for line in dialect_branches(path.read_text())
    }
    assert branches == {}, "choose by database in core/backends (a method of Backend), not here"


async def test_the_database_chooses_its_backend_and_sessions_carry_it(db: Database) -> None:
    expected = sa.make_url(db.url).get_backend_name()
    assert db.backend.name == expected
    async with db.reading() as reader, db.transaction() as writer:
        assert backend_of(reader) is db.backend
        assert backend_of(writer) is db.backend
    # A session made without the Database finds it from its bind.
    async with AsyncSession(db.engine) as session:
        assert backend_of(session) is db.backend


def test_a_database_vouch_does_not_run_on_is_refused() -> None:
    with pytest.raises(ValueError, match="SQLite or PostgreSQL, not mysql"):
        backend_for("mysql")
