"""What every caller command shares: exit codes, one-line errors, the client's connection, reading a file.

Exit codes, so CI jobs can gate on them, are listed in cli.py's docstring.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

import click
import yaml
from pydantic import ValidationError

from vouch_client.aio import AsyncClient
from vouch_client.errors import ApiError, StreamError, TransportError, VouchError, WaitTimeout

T = TypeVar("T")

EXIT_CODES = {"completed": 0, "failed": 1, "rejected": 2, "cancelled": 3}
EXIT_TIMEOUT, EXIT_API, EXIT_UNREACHABLE, EXIT_USAGE = 4, 5, 6, 64


class _Failure(click.ClickException):
    """One line on stderr and the exit code of its kind."""

    def show(self, file: Any = None) -> None:
        click.echo(f"vouch: {self.format_message()}", err=True)


class TimedOut(_Failure):
    exit_code = EXIT_TIMEOUT


class Refused(_Failure):
    exit_code = EXIT_API


class Unreachable(_Failure):
    exit_code = EXIT_UNREACHABLE


class BadUsage(_Failure):
    exit_code = EXIT_USAGE


class _Usage(click.UsageError):
    exit_code = EXIT_USAGE


class CallerGroup(click.Group):
    """A group whose usage errors exit 64, apart from the run outcomes 1-4 (click's own default is 2)."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except click.UsageError as exc:
            if isinstance(exc, _Usage):
                raise
            raise _Usage(exc.format_message(), exc.ctx) from None


def client_of(ctx: click.Context) -> AsyncClient:
    url, key = ctx.obj["url"], ctx.obj["api_key"]
    try:
        return AsyncClient(url, key)
    except VouchError as exc:
        raise BadUsage(f"{exc} (or use --url / --api-key)") from None


def run(ctx: click.Context, work: Callable[[AsyncClient], Awaitable[T]]) -> T:
    """Run `work` with a client; API and transport errors become one line and their exit code."""

    async def main() -> T:
        async with client_of(ctx) as client:
            return await work(client)

    try:
        return asyncio.run(main())
    except ApiError as exc:
        raise Refused(f"{exc.code}: {exc.detail}") from None
    except (TransportError, StreamError) as exc:
        raise Unreachable(f"cannot reach {ctx.obj['url']}: {exc}") from None
    except WaitTimeout as exc:
        raise TimedOut(str(exc)) from None


def connection_options(group: click.Group) -> click.Group:
    group = click.option("--api-key", envvar="VOUCH_API_KEY", help="API key (default: $VOUCH_API_KEY).")(group)
    return click.option("--url", envvar="VOUCH_URL", help="Vouch's address (default: $VOUCH_URL).")(group)


def read_document(path: str, what: str) -> dict[str, Any]:
    """The one object a JSON or YAML file (or stdin, `-`) holds; a usage error (64) otherwise."""
    try:
        text = sys.stdin.read() if path == "-" else Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise BadUsage(f"cannot read {path}: {exc.strerror}") from None
    try:
        # YAML is a superset of JSON, so one parser reads both kinds of file.
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise BadUsage(f"{path} is neither JSON nor YAML: {str(exc).splitlines()[0]}") from None
    if not isinstance(data, dict):
        raise BadUsage(f"{path} must hold one {what}")
    return data


def invalid(path: str, error: ValidationError, whole: str) -> BadUsage:
    """A usage error naming the first invalid field of a file; `whole` when it is the file's object itself."""
    first = error.errors()[0]
    where = ".".join(str(part) for part in first["loc"]) or whole
    return BadUsage(f"{path}: {where}: {first['msg']}")
