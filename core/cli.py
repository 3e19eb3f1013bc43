"""The `vouch` command: run the service and administer it.

This is the composition root, so the commands that start processes import the app
and the worker lazily; nothing else in core reaches into a sibling package.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import sys
from collections.abc import Awaitable, Callable
from typing import TypeVar

import click
from sqlalchemy.ext.asyncio import AsyncSession

from core import apikeys
from core.accounts import (
    AccountError,
    create_api_key,
    create_user,
    key_state,
    list_api_keys,
    revoke_api_key,
    user_by_email,
)
from core.bus import InProcessBus
from core.db import Database
from core.logs import configure_logging
from core.models import User, utcnow
from core.settings import Settings, SettingsError, load_settings

T = TypeVar("T")


def _settings() -> Settings:
    try:
        return load_settings()
    except SettingsError as exc:
        raise click.ClickException(str(exc)) from None


def _with_db(settings: Settings, work: Callable[[Database], Awaitable[T]]) -> T:
    async def run() -> T:
        db = Database(settings.database_url, InProcessBus())
        try:
            return await work(db)
        finally:
            await db.dispose()

    try:
        return asyncio.run(run())
    except AccountError as exc:
        raise click.ClickException(str(exc)) from None


def _log_setup(settings: Settings | None = None) -> None:
    configure_logging(logging.INFO, settings.log_format if settings is not None else "text")


@click.group()
def main() -> None:
    """Vouch: evaluation tasks run by AI agents, vouched for by humans."""


def _add_caller_commands() -> None:
    """`vouch tasks …` and `vouch checkpoints …`: a caller's commands, which speak to a server over its API."""
    from api.client.cli import COMMANDS  # the composition root may reach a sibling; nothing else in core does

    for command in COMMANDS:
        main.add_command(command)


_add_caller_commands()


@main.group()
def db() -> None:
    """Database schema."""


@db.command("upgrade")
@click.option("--revision", default="head", show_default=True)
def db_upgrade(revision: str) -> None:
    """Migrate the database schema."""
    from core.migrate import upgrade

    upgrade(_settings().database_url, revision)
    click.echo(f"database at {revision}", err=True)


def _serve(settings: Settings, host: str, port: int, run_worker: bool) -> None:
    import uvicorn

    from api.app import create_asgi_app

    _log_setup(settings)
    app = create_asgi_app(settings, run_worker=run_worker)
    # JSON logs: uvicorn's own loggers keep no handlers of their own and go through ours (log_config=None).
    log_config = uvicorn.config.LOGGING_CONFIG if settings.log_format == "text" else None
    uvicorn.run(
        app, host=host, port=port, log_level="info", lifespan="on", ws="websockets-sansio", log_config=log_config
    )


@main.command()
@click.option("--host", default="127.0.0.1", show_default=True)
@click.option("--port", default=8000, show_default=True, type=int)
def serve(host: str, port: int) -> None:
    """The web app and an in-process worker: the whole service in one process."""
    from core.migrate import upgrade

    settings = _settings()
    upgrade(settings.database_url)
    click.echo(f"Vouch on http://{host}:{port}  (database {settings.database_url.split('://')[0]})", err=True)
    _serve(settings, host, port, run_worker=True)


@main.command()
@click.option("--host", default="127.0.0.1", show_default=True)
@click.option("--port", default=8000, show_default=True, type=int)
def web(host: str, port: int) -> None:
    """The web app alone (Procfile `web`); run workers with `vouch worker`."""
    _serve(_settings(), host, port, run_worker=False)


@main.command()
def worker() -> None:
    """A worker process (Procfile `worker`): claims and runs executions until SIGTERM."""
    from agents.worker import Worker
    from core.bus import make_bus

    settings = _settings()
    _log_setup(settings)

    async def run() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        bus = make_bus(settings.redis_url)
        database = Database(settings.database_url, bus)
        emitter = None
        if settings.redis_url:
            # Chat watchers sit on the web processes: this worker's events reach them through Redis.
            from chat.fanout import WorkerEmitter

            emitter = WorkerEmitter(settings.redis_url)
            database.add_event_sink(emitter.sink)
        try:
            await Worker(settings, database).run(stop)
        finally:
            await database.dispose()
            await bus.close()
            if emitter is not None:
                await emitter.close()

    asyncio.run(run())


@main.group()
def users() -> None:
    """User accounts."""


@users.command("create")
@click.argument("email")
@click.option("--password-stdin", is_flag=True, help="Read the user's password from standard input.")
def users_create(email: str, password_stdin: bool) -> None:
    """Create a user (reviewers sign in with their e-mail address)."""
    password = sys.stdin.readline().rstrip("\r\n") if password_stdin else None
    settings = _settings()

    async def work(database: Database) -> str:
        async with database.transaction() as session:
            user = await create_user(session, email, password)
            return user.email

    click.echo(f"created user {_with_db(settings, work)}", err=True)


@main.group()
def keys() -> None:
    """API keys."""


async def _user(session: AsyncSession, email: str) -> User:
    user = await user_by_email(session, email)
    if user is None:
        raise AccountError(f"no user with e-mail {email}")
    return user


@keys.command("create")
@click.argument("email")
@click.option("--name", required=True)
@click.option(
    "--scope", "scopes", multiple=True, required=True, help=f"One of {', '.join(apikeys.SCOPES)}; repeatable."
)
@click.option("--description", default="")
@click.option("--expires-in-days", type=int, default=30, show_default=True)
def keys_create(email: str, name: str, scopes: tuple[str, ...], description: str, expires_in_days: int) -> None:
    """Create an API key; prints it alone on standard output, the only time it is shown."""
    settings = _settings()

    async def work(database: Database) -> str:
        async with database.transaction() as session:
            new = await create_api_key(
                session,
                await _user(session, email),
                name=name,
                scopes=list(scopes),
                description=description,
                expires_in_days=expires_in_days,
                secret_key=settings.secret_key,
            )
            return new.secret

    click.echo(_with_db(settings, work))


@keys.command("list")
@click.argument("email")
def keys_list(email: str) -> None:
    """List a user's keys (never their secrets)."""
    settings = _settings()

    async def work(database: Database) -> list[str]:
        async with database.reading() as session:
            now = utcnow()
            rows = await list_api_keys(session, await _user(session, email))
            return [
                "\t".join(
                    (
                        key.id,
                        key.hint,
                        key_state(key, now),
                        ",".join(key.scopes),
                        key.expires_at.date().isoformat() if key.expires_at else "never",
                        key.name,
                    )
                )
                for key in rows
            ]

    lines = _with_db(settings, work)
    click.echo("id\tkey\tstate\tscopes\texpires\tname")
    for line in lines:
        click.echo(line)


@keys.command("revoke")
@click.argument("key_id")
def keys_revoke(key_id: str) -> None:
    """Revoke a key; it stops working on its next request."""
    settings = _settings()

    async def work(database: Database) -> str:
        async with database.transaction() as session:
            key = await revoke_api_key(session, key_id)
            return key.id

    click.echo(f"revoked {_with_db(settings, work)}", err=True)


@main.group()
def webhooks() -> None:
    """Webhook signing secrets."""


@webhooks.command("secret")
@click.argument("email")
@click.option("--rotate", is_flag=True, help="Make a new secret; the old one keeps signing for 24 hours.")
def webhooks_secret(email: str, rotate: bool) -> None:
    """Print the user's current webhook signing secret (`whsec_…`) alone on standard output."""
    from core.webhook_secrets import rotate_secret, signing_secrets

    settings = _settings()

    async def work(database: Database) -> tuple[str, str | None]:
        async with database.transaction() as session:
            user = await _user(session, email)
            if rotate:
                secrets = await rotate_secret(session, settings.secret_key, user.id)
            else:
                secrets = await signing_secrets(session, settings.secret_key, user.id)
            retires = secrets.previous_retires_at
            return secrets.current, retires.isoformat(timespec="seconds") if retires else None

    secret, retires = _with_db(settings, work)
    if retires:
        click.echo(f"the previous secret also signs until {retires}", err=True)
    click.echo(secret)
