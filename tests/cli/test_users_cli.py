"""`vouch users …`: a password asked on a terminal or read from stdin, set-password, list, disable; and operator
commands run away from the service's data directory."""

from __future__ import annotations

import asyncio
import os
import shlex
import subprocess
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import sqlalchemy as sa
from argon2 import PasswordHasher

from api.app import create_app
from api.signin import BAD_CREDENTIALS
from core.bus import InProcessBus
from core.db import Database
from core.models import User
from core.settings import Settings
from tests.conftest import bearer
from tests.support.processes import VOUCH, run_vouch, vouch_env
from tests.support.terminal import tmux_terminal
from tests.web.browser import Browser, Page
from tests.web.conftest import Site

PASSWORD = "correct horse battery"


@pytest.fixture
async def uncached_site(settings: Settings) -> AsyncIterator[Site]:
    """The web app with its API-key cache off: the CLI writes beside it on no shared bus, so a cached key would
    keep working up to VOUCH_AUTH_CACHE_SECONDS (the documented bound), which is not what these tests are about."""
    uncached = settings.with_changes(auth_cache_seconds=0.0)
    app = create_app(uncached, run_worker=False)
    async with app.test_app():
        yield Site(app, uncached)


async def sign_in(browser: Browser, email: str, password: str) -> Page:
    form = await browser.get("/signin")
    assert form.status == 200, form.text
    return await browser.post("/signin", {"csrf_token": form.csrf(), "email": email, "password": password})


def ok(result: subprocess.CompletedProcess[str]) -> subprocess.CompletedProcess[str]:
    assert result.returncode == 0, result.stderr
    return result


async def api_status(site: Site, key: str) -> int:
    response = await site.app.test_client().get("/api/eval/status/exe_nothing", headers=bearer(key))
    return response.status_code


async def test_set_password_lets_a_user_made_without_one_sign_in_and_ends_their_sessions(
    uncached_site: Site, settings: Settings
) -> None:
    site = uncached_site
    made = ok(run_vouch(settings, "users", "create", "ann@example.com"))
    assert "no password: cannot sign in yet" in made.stderr
    assert (await sign_in(site.browser(), "ann@example.com", "")).status == 401

    ok(run_vouch(settings, "users", "set-password", "ann@example.com", "--password-stdin", stdin=PASSWORD + "\n"))
    first = site.browser()
    assert (await sign_in(first, "ann@example.com", PASSWORD)).status == 303
    assert (await first.get("/keys")).status == 200

    ok(run_vouch(settings, "users", "set-password", "ann@example.com", "--password-stdin", stdin="another one\n"))
    after = await first.get("/keys")
    assert after.status == 303 and after.location is not None and after.location.startswith("/signin")
    assert (await sign_in(site.browser(), "ann@example.com", PASSWORD)).status == 401
    assert (await sign_in(site.browser(), "ann@example.com", "another one")).status == 303

    short = run_vouch(settings, "users", "set-password", "ann@example.com", "--password-stdin", stdin="short\n")
    assert short.returncode == 1 and short.stderr.count("\n") == 1 and "at least 8 characters" in short.stderr
    nobody = run_vouch(settings, "users", "set-password", "nobody@example.com", "--password-stdin", stdin=PASSWORD)
    assert nobody.returncode == 1 and "no user with e-mail nobody@example.com" in nobody.stderr
    # With neither a terminal nor --password-stdin there is no password to set: said, not guessed.
    piped = run_vouch(settings, "users", "set-password", "ann@example.com", stdin="")
    assert piped.returncode == 2 and "--password-stdin" in piped.stderr


async def test_a_disabled_user_cannot_sign_in_their_sessions_end_and_their_keys_stop(
    uncached_site: Site, settings: Settings
) -> None:
    site = uncached_site
    ok(run_vouch(settings, "users", "create", "bob@example.com", "--password-stdin", stdin=PASSWORD + "\n"))
    ok(run_vouch(settings, "users", "create", "cat@example.com", "--password-stdin", stdin=PASSWORD + "\n"))
    key = ok(run_vouch(settings, "keys", "create", "bob@example.com", "--name", "ci", "--scope", "eval:read")).stdout
    other_key = ok(run_vouch(settings, "keys", "create", "cat@example.com", "--name", "ci", "--scope", "eval:read"))
    browser = site.browser()
    assert (await sign_in(browser, "bob@example.com", PASSWORD)).status == 303
    assert (await browser.get("/keys")).status == 200
    assert await api_status(site, key.strip()) == 404  # authenticated: the execution is unknown

    done = ok(run_vouch(settings, "users", "disable", "bob@example.com"))
    assert done.stderr == "disabled bob@example.com\n"

    assert (await browser.get("/keys")).status == 303  # the session ended
    refused = await sign_in(site.browser(), "bob@example.com", PASSWORD)
    assert refused.status == 401 and BAD_CREDENTIALS in refused.text
    assert await api_status(site, key.strip()) == 401
    # Another user is untouched.
    assert await api_status(site, other_key.stdout.strip()) == 404
    assert (await sign_in(site.browser(), "cat@example.com", PASSWORD)).status == 303

    again = ok(run_vouch(settings, "users", "disable", "bob@example.com"))
    assert again.stderr == "bob@example.com was already disabled\n"
    listing = ok(run_vouch(settings, "users", "list")).stdout.splitlines()
    assert listing[0].split() == ["email", "state", "password", "created"]
    rows = {line.split()[0]: line.split()[1:3] for line in listing[1:]}
    assert rows == {"bob@example.com": ["disabled", "yes"], "cat@example.com": ["active", "yes"]}
    # Aligned columns: every row's second column starts where the header's does.
    assert {line.index(line.split()[1]) for line in listing} == {listing[0].index("state")}


def test_users_create_on_a_terminal_asks_twice_and_asks_again_when_they_differ(
    settings: Settings, tmp_path: Path
) -> None:
    env = vouch_env(settings)
    exports = " ".join(f"{name}={shlex.quote(env[name])}" for name in env if name.startswith("VOUCH_"))
    command = f"env {exports} {shlex.quote(VOUCH)} users create tty@example.com; echo \"[exit $?]\"; exec cat"
    with tmux_terminal(tmp_path) as terminal:
        terminal.tmux("new-session", "-d", "-s", "watch", "-x", "160", "-y", "40", command)
        terminal.shows("Password:")
        terminal.tmux("send-keys", "-t", "watch", "first try one", "Enter")
        terminal.shows("Password again:")
        terminal.tmux("send-keys", "-t", "watch", "first try two", "Enter")
        terminal.shows("do not match")
        terminal.tmux("send-keys", "-t", "watch", "the real one", "Enter")
        terminal.shows("Password again:")
        terminal.tmux("send-keys", "-t", "watch", "the real one", "Enter")
        screen = terminal.shows("[exit 0]")
    assert "created user tty@example.com" in screen
    assert "first try" not in screen and "the real one" not in screen  # never echoed
    assert PasswordHasher().verify(asyncio.run(_password_hash(settings, "tty@example.com")), "the real one")


async def _password_hash(settings: Settings, email: str) -> str:
    database = Database(settings.database_url, InProcessBus())
    try:
        async with database.reading() as session:
            stored = await session.scalar(sa.select(User.password_hash).where(User.email == email))
    finally:
        await database.dispose()
    assert stored is not None
    return stored


def _bare_env() -> dict[str, str]:
    return {name: value for name, value in os.environ.items() if not name.startswith("VOUCH_")}


@pytest.mark.parametrize(
    "command", [["users", "list"], ["keys", "list", "a@example.com"], ["users", "disable", "a@b.cc"]]
)
def test_an_operator_command_away_from_the_data_directory_says_where_it_looked_in_one_line(
    tmp_path: Path, command: list[str]
) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    result = subprocess.run(
        [VOUCH, *command], cwd=elsewhere, env=_bare_env(), capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 1, result.stderr
    assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr
    assert f"no Vouch database at {elsewhere / 'var' / 'vouch.sqlite3'}" in result.stderr
    assert "VOUCH_DATA_DIR" in result.stderr
    assert list(elsewhere.iterdir()) == []  # no stray var/


def test_an_operator_command_on_a_database_without_the_schema_says_so_in_one_line(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    sa.create_engine(f"sqlite:///{data / 'vouch.sqlite3'}").connect().close()  # a file, no tables
    result = subprocess.run(
        [VOUCH, "users", "list"], cwd=tmp_path, env={**_bare_env(), "VOUCH_DATA_DIR": str(data)},
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert result.returncode == 1 and result.stderr.count("\n") == 1, result.stderr
    assert f"the database at {data / 'vouch.sqlite3'} is not usable (no such table: users)" in result.stderr
    assert "vouch db upgrade" in result.stderr
