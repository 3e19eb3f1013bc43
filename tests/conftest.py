"""Fixtures: every database test runs on each selected backend (VOUCH_TEST_DATABASES)."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from quart import Quart
from quart.testing import QuartClient

from api.app import create_app
from api.auth import Caller
from core.accounts import create_api_key, create_user
from core.apikeys import effective_scopes
from core.bus import InProcessBus
from core.db import Database
from core.settings import Settings
from tests.support.databases import PostgresTemplate, SqliteTemplate, selected_backends

SECRET = b"test-secret-key-that-is-long-enough-0123456789"


def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """`-n auto` (pyproject's addopts): twice the CPUs, at most 4. The tests mostly wait (on PostgreSQL, servers,
    subprocesses, a browser), so two workers per core keep the cores busy; past 4 on 2 cores, the timing-bound
    tests and PostgreSQL's 100 connections are shared among too many. A run of tests named one by one
    (`path::test`) stays in this process: starting workers would cost more than it saves.
    PYTEST_XDIST_AUTO_NUM_WORKERS, or `-n N` on the command line, chooses otherwise."""
    if chosen := os.environ.get("PYTEST_XDIST_AUTO_NUM_WORKERS"):
        return int(chosen)
    if config.args and all("::" in arg for arg in config.args):
        return 0
    return min(4, 2 * len(os.sched_getaffinity(0)))


@pytest.fixture(scope="session")
def templates(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    made: dict[str, Any] = {}
    try:
        for backend in selected_backends():
            made[backend] = (
                SqliteTemplate(tmp_path_factory.mktemp("template")) if backend == "sqlite" else PostgresTemplate()
            )
        yield made
    finally:
        for template in made.values():
            template.close()


@pytest.fixture(params=selected_backends())
def database_url(request: pytest.FixtureRequest, templates: dict[str, Any], tmp_path: Path) -> Iterator[str]:
    template = templates[request.param]
    url: str = template.new_database(tmp_path)
    yield url
    template.drop(url)


@pytest.fixture
def settings(database_url: str, tmp_path: Path) -> Settings:
    return Settings(
        data_dir=tmp_path,
        database_url=database_url,
        secret_key=SECRET,
        # https: browser cookies are __Host- and Secure there (Settings.secure_cookies), as the web tests expect.
        base_url="https://vouch.test",
        worker_poll_seconds=5.0,
        worker_lease_seconds=30.0,
    )


@pytest.fixture
async def db(settings: Settings) -> AsyncIterator[Database]:
    database = Database(settings.database_url, InProcessBus())
    yield database
    await database.dispose()


@dataclass
class Account:
    email: str
    user_id: str
    key: str
    key_id: str

    def caller(self) -> Caller:
        return Caller(self.user_id, self.email, self.key_id, effective_scopes(self.scopes))

    scopes: tuple[str, ...] = ("eval:manage",)


async def make_account(db: Database, settings: Settings, email: str, *scopes: str) -> Account:
    async with db.transaction() as session:
        user = await create_user(session, email, "correct horse battery")
        new = await create_api_key(
            session, user, name="test", scopes=list(scopes or ("eval:manage",)), secret_key=settings.secret_key
        )
        return Account(user.email, user.id, new.secret, new.record.id, tuple(new.record.scopes))


@dataclass
class Service:
    app: Quart
    client: QuartClient
    settings: Settings

    @property
    def db(self) -> Database:
        database: Database = self.app.extensions["vouch"].db
        return database

    async def account(self, email: str, *scopes: str) -> Account:
        return await make_account(self.db, self.settings, email, *scopes)


@pytest.fixture
async def service(settings: Settings) -> AsyncIterator[Service]:
    """The web app with its in-process worker, as `vouch serve` runs it (no socket)."""
    app = create_app(settings, run_worker=True)
    async with app.test_app() as test_app:
        yield Service(app, test_app.test_client(), settings)


@pytest.fixture
async def api_only(settings: Settings) -> AsyncIterator[Service]:
    """The web app without a worker: executions stay where the API left them."""
    app = create_app(settings, run_worker=False)
    async with app.test_app() as test_app:
        yield Service(app, test_app.test_client(), settings)


def bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}
