"""Test databases: a migrated template per backend, copied for every test."""

from __future__ import annotations

import asyncio
import os
import shutil
import uuid
from pathlib import Path

import asyncpg

from core.migrate import upgrade

PG_ADMIN_DSN = os.environ.get("VOUCH_TEST_PG_DSN", "postgresql://postgres@127.0.0.1:5432/test")
PG_HOST_URL = PG_ADMIN_DSN.rsplit("/", 1)[0]


def selected_backends() -> list[str]:
    raw = os.environ.get("VOUCH_TEST_DATABASES", "sqlite,postgresql")
    chosen = [name.strip() for name in raw.split(",") if name.strip()]
    unknown = set(chosen) - {"sqlite", "postgresql"}
    if unknown or not chosen:
        raise RuntimeError(f"VOUCH_TEST_DATABASES: unknown backend(s) {sorted(unknown)}; use sqlite,postgresql")
    return chosen


async def _pg_admin(statement: str) -> None:
    conn = await asyncpg.connect(PG_ADMIN_DSN)
    try:
        await conn.execute(statement)
    finally:
        await conn.close()


def pg(statement: str) -> None:
    asyncio.run(_pg_admin(statement))


class SqliteTemplate:
    def __init__(self, directory: Path) -> None:
        self.path = directory / "template.sqlite3"
        upgrade(f"sqlite+aiosqlite:///{self.path}")

    def new_database(self, directory: Path) -> str:
        target = directory / "vouch.sqlite3"
        shutil.copyfile(self.path, target)
        return f"sqlite+aiosqlite:///{target}"

    def drop(self, url: str) -> None:
        pass

    def close(self) -> None:
        pass


class PostgresTemplate:
    def __init__(self) -> None:
        self.name = f"vouch_tpl_{uuid.uuid4().hex[:12]}"
        pg(f"CREATE DATABASE {self.name}")
        upgrade(f"postgresql+asyncpg://{PG_HOST_URL.split('://', 1)[1]}/{self.name}")

    def new_database(self, directory: Path) -> str:
        name = f"vouch_t_{uuid.uuid4().hex[:16]}"
        pg(f"CREATE DATABASE {name} TEMPLATE {self.name}")
        return f"postgresql+asyncpg://{PG_HOST_URL.split('://', 1)[1]}/{name}"

    def drop(self, url: str) -> None:
        pg(f"DROP DATABASE IF EXISTS {url.rsplit('/', 1)[1]} WITH (FORCE)")

    def close(self) -> None:
        pg(f"DROP DATABASE IF EXISTS {self.name} WITH (FORCE)")
