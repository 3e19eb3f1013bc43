"""`vouch users …`, `vouch keys …` and `vouch webhooks …`: accounts, API keys and webhook secrets, written
straight to the database (an operator's commands, run where the service's settings are)."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Awaitable, Callable
from typing import TypeVar

import click
from sqlalchemy.ext.asyncio import AsyncSession

from api.cli import settings_or_exit
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
from core.models import User, utcnow
from core.settings import Settings

T = TypeVar("T")


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


@click.group()
def users() -> None:
    """User accounts."""


@users.command("create")
@click.argument("email")
@click.option("--password-stdin", is_flag=True, help="Read the user's password from standard input.")
def users_create(email: str, password_stdin: bool) -> None:
    """Create a user (reviewers sign in with their e-mail address)."""
    password = sys.stdin.readline().rstrip("\r\n") if password_stdin else None
    settings = settings_or_exit()

    async def work(database: Database) -> str:
        async with database.transaction() as session:
            user = await create_user(session, email, password)
            return user.email

    click.echo(f"created user {_with_db(settings, work)}", err=True)


@click.group()
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
    settings = settings_or_exit()

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
    settings = settings_or_exit()

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
    settings = settings_or_exit()

    async def work(database: Database) -> str:
        async with database.transaction() as session:
            key = await revoke_api_key(session, key_id)
            return key.id

    click.echo(f"revoked {_with_db(settings, work)}", err=True)


@click.group()
def webhooks() -> None:
    """Webhook signing secrets."""


@webhooks.command("secret")
@click.argument("email")
@click.option("--rotate", is_flag=True, help="Make a new secret; the old one keeps signing for 24 hours.")
def webhooks_secret(email: str, rotate: bool) -> None:
    """Print the user's current webhook signing secret (`whsec_…`) alone on standard output."""
    from core.webhook_secrets import rotate_secret, signing_secrets

    settings = settings_or_exit()

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
