"""`vouch users …`, `vouch keys …` and `vouch webhooks …`: accounts, API keys and webhook secrets, written
straight to the database (an operator's commands, run where the service's settings are)."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Awaitable, Callable
from typing import TypeVar

import click
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncSession

from api.cli import database_problem
from api.cli import operator_settings_or_exit as settings_or_exit
from core import apikeys
from core.accounts import (
    AccountError,
    check_new_password,
    create_api_key,
    create_user,
    disable_user,
    enable_user,
    key_state,
    list_api_keys,
    list_users,
    revoke_api_key,
    set_password,
    user_by_email,
)
from core.bus import InProcessBus
from core.db import Database
from core.models import User, utcnow
from core.settings import Settings
from review.disabled_reviewer import Stranded, reviewer_disabled

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
    except DBAPIError as exc:
        # A database that is there but not Vouch's (no tables), or one that refuses us: one line, never a traceback.
        raise click.ClickException(database_problem(settings, exc)) from None


def _read_password(password_stdin: bool, *, required: bool) -> str | None:
    """The password from standard input (--password-stdin), else asked twice on a terminal; None where there is
    neither and `required` is off."""
    if password_stdin:
        password = sys.stdin.readline().rstrip("\r\n")
    elif sys.stdin.isatty():
        password = click.prompt("Password", hide_input=True, confirmation_prompt="Password again", err=True)
    elif required:
        raise click.UsageError("no terminal to ask on: pipe the password in with --password-stdin")
    else:
        return None
    try:
        check_new_password(password)
    except AccountError as exc:
        raise click.ClickException(str(exc)) from None
    return password


@click.group()
def users() -> None:
    """User accounts."""


@users.command("create")
@click.argument("email")
@click.option("--password-stdin", is_flag=True, help="Read the user's password from standard input.")
def users_create(email: str, password_stdin: bool) -> None:
    """Create a user (reviewers sign in with their e-mail address and password).

    On a terminal it asks for the password twice; in a script pipe it in with --password-stdin. With neither,
    the user gets no password: API keys only, no sign-in until `vouch users set-password`."""
    settings = settings_or_exit()
    password = _read_password(password_stdin, required=False)

    async def work(database: Database) -> str:
        async with database.transaction() as session:
            user = await create_user(session, email, password)
            return user.email

    made = _with_db(settings, work)
    click.echo(f"created user {made}" + ("" if password else " (no password: cannot sign in yet)"), err=True)


@users.command("set-password")
@click.argument("email")
@click.option("--password-stdin", is_flag=True, help="Read the new password from standard input.")
def users_set_password(email: str, password_stdin: bool) -> None:
    """Give a user a new password (asked twice on a terminal); their browser sessions end."""
    settings = settings_or_exit()
    password = _read_password(password_stdin, required=True)
    assert password is not None  # required

    async def work(database: Database) -> str:
        async with database.transaction() as session:
            user = await _user(session, email)
            await set_password(session, user, password)
            return user.email

    click.echo(f"password set for {_with_db(settings, work)}", err=True)


@users.command("list")
def users_list() -> None:
    """Every user: e-mail, whether they can sign in, when made."""
    settings = settings_or_exit()

    async def work(database: Database) -> list[tuple[str, str, str, str]]:
        async with database.reading() as session:
            return [
                (
                    user.email,
                    "disabled" if user.disabled_at else "active",
                    "yes" if user.password_hash else "no",
                    user.created_at.date().isoformat(),
                )
                for user in await list_users(session)
            ]

    rows = [("email", "state", "password", "created"), *_with_db(settings, work)]
    widths = [max(len(row[i]) for row in rows) for i in range(3)]
    for row in rows:
        click.echo("  ".join(cell.ljust(width) for cell, width in zip(row[:3], widths, strict=True)) + "  " + row[3])


@users.command("disable")
@click.argument("email")
def users_disable(email: str) -> None:
    """Disable a user: they cannot sign in, their sessions end, their API keys stop working, and they decide no
    checkpoint on any channel. The owner of each execution waiting for them is mailed."""
    settings = settings_or_exit()

    async def work(database: Database) -> tuple[str, bool, list[Stranded]]:
        async with database.transaction() as session:
            user = await _user(session, email)
            changed = await disable_user(session, user)
            return user.email, changed, await reviewer_disabled(session, settings, user.email) if changed else []

    done, changed, stranded = _with_db(settings, work)
    click.echo(f"disabled {done}" if changed else f"{done} was already disabled", err=True)
    for each in stranded:
        then = f"; escalated to {each.backup}" if each.backup else ""
        click.echo(f"execution {each.execution_id} waited for {done}: {each.owner} was told{then}", err=True)


@users.command("enable")
@click.argument("email")
def users_enable(email: str) -> None:
    """Enable a disabled user again: they can sign in and their unrevoked API keys work again."""
    settings = settings_or_exit()

    async def work(database: Database) -> tuple[str, bool]:
        async with database.transaction() as session:
            user = await _user(session, email)
            return user.email, await enable_user(session, user)

    done, changed = _with_db(settings, work)
    click.echo(f"enabled {done}" if changed else f"{done} was not disabled", err=True)


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
