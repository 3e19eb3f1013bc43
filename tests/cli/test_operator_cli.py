"""The operator's `vouch` command, run as the installed console script."""

from __future__ import annotations

from pathlib import Path

import sqlalchemy as sa
from argon2 import PasswordHasher

from core.accounts import create_api_key, user_by_email
from core.apikeys import is_well_formed, key_digest
from core.db import Database
from core.models import ApiKey, User
from core.settings import Settings
from tests.support.processes import run_vouch


def _one_line_error(result: object) -> str:
    stderr: str = result.stderr  # type: ignore[attr-defined]
    assert result.returncode != 0  # type: ignore[attr-defined]
    assert stderr.count("\n") == 1, stderr
    return stderr


async def test_users_create_with_password_from_stdin(settings: Settings, db: Database) -> None:
    result = run_vouch(settings, "users", "create", "Rita@Example.COM", "--password-stdin", stdin="s3cret-pass\n")
    assert result.returncode == 0, result.stderr
    async with db.reading() as session:
        user = await session.scalar(sa.select(User))
    assert user is not None and user.email == "rita@example.com"
    assert user.password_hash is not None and user.password_hash.startswith("$argon2id$")
    assert PasswordHasher().verify(user.password_hash, "s3cret-pass")


async def test_users_create_refuses_duplicates_and_bad_addresses(settings: Settings) -> None:
    assert run_vouch(settings, "users", "create", "a@example.com").returncode == 0
    assert "already exists" in _one_line_error(run_vouch(settings, "users", "create", "A@example.com"))
    assert "not a valid e-mail" in _one_line_error(run_vouch(settings, "users", "create", "not-an-address"))


async def test_keys_create_prints_only_the_key_and_stores_only_its_hmac(settings: Settings, db: Database) -> None:
    assert run_vouch(settings, "users", "create", "k@example.com").returncode == 0
    result = run_vouch(
        settings, "keys", "create", "k@example.com", "--name", "CI", "--scope", "eval:read",
        "--scope", "eval:create", "--description", "nightly runs", "--expires-in-days", "7",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    key = result.stdout.removesuffix("\n")
    assert result.stdout == key + "\n" and is_well_formed(key)
    async with db.reading() as session:
        row = await session.scalar(sa.select(ApiKey))
    assert row is not None
    assert row.digest == key_digest(key, settings.secret_key)
    assert key not in (row.digest, row.hint, row.name, row.description)
    assert row.hint == f"svc_eval_…{key[-4:]}"
    assert sorted(row.scopes) == ["eval:create", "eval:read"]
    assert row.expires_at is not None and 6.9 < (row.expires_at - row.created_at).total_seconds() / 86400 < 7.1


async def test_keys_create_bad_input_exits_nonzero_with_one_line(settings: Settings) -> None:
    assert "no user" in _one_line_error(
        run_vouch(settings, "keys", "create", "ghost@example.com", "--name", "x", "--scope", "eval:read")
    )
    assert run_vouch(settings, "users", "create", "k@example.com").returncode == 0
    assert "unknown scope eval:write" in _one_line_error(
        run_vouch(settings, "keys", "create", "k@example.com", "--name", "x", "--scope", "eval:write")
    )
    assert "expiry" in _one_line_error(
        run_vouch(settings, "keys", "create", "k@example.com", "--name", "x", "--scope", "eval:read",
                  "--expires-in-days", "0")
    )  # fmt: skip


async def test_eleventh_active_key_is_refused_until_one_is_revoked(settings: Settings, db: Database) -> None:
    assert run_vouch(settings, "users", "create", "k@example.com").returncode == 0
    async with db.transaction() as session:
        user = await user_by_email(session, "k@example.com")
        assert user is not None
        for n in range(9):
            await create_api_key(session, user, name=f"k{n}", scopes=["eval:read"], secret_key=settings.secret_key)
    made = run_vouch(settings, "keys", "create", "k@example.com", "--name", "k9", "--scope", "eval:read")
    assert made.returncode == 0, made.stderr
    refused = _one_line_error(
        run_vouch(settings, "keys", "create", "k@example.com", "--name", "k10", "--scope", "eval:read")
    )
    assert "10 active keys" in refused

    listing = run_vouch(settings, "keys", "list", "k@example.com")
    assert listing.returncode == 0
    rows = [line.split("\t") for line in listing.stdout.splitlines()[1:]]
    assert len(rows) == 10 and all(row[2] == "active" for row in rows)
    revoked = run_vouch(settings, "keys", "revoke", rows[0][0])
    assert revoked.returncode == 0, revoked.stderr
    after = run_vouch(settings, "keys", "list", "k@example.com").stdout.splitlines()[1:]
    assert [line.split("\t")[2] for line in after].count("revoked") == 1
    assert (
        run_vouch(settings, "keys", "create", "k@example.com", "--name", "k10", "--scope", "eval:read").returncode == 0
    )
    assert "no API key" in _one_line_error(run_vouch(settings, "keys", "revoke", "key_doesnotexist"))


def test_db_upgrade_creates_the_schema_on_a_fresh_sqlite_file(tmp_path: Path) -> None:
    target = tmp_path / "fresh.sqlite3"
    settings = Settings(data_dir=tmp_path, database_url=f"sqlite+aiosqlite:///{target}", secret_key=b"x" * 40)
    result = run_vouch(settings, "db", "upgrade")
    assert result.returncode == 0, result.stderr
    engine = sa.create_engine(f"sqlite:///{target}")
    with engine.connect() as conn:
        tables = set(sa.inspect(conn).get_table_names())
    engine.dispose()
    assert {"users", "api_keys", "executions", "checkpoints", "decisions", "events", "tool_calls"} <= tables
