"""The `vouch` command: run the service and administer it.

This is the composition root: it lives in `api`, the top layer (every way in), so it may start any part; it
imports each lazily. A command loads only what it uses: `vouch keys create` in a script should not pay for the web
app, the worker and the Socket.IO client (two seconds of imports on this machine, where the command's own work takes
a few milliseconds).
"""

from __future__ import annotations

import asyncio
import errno
import importlib
import logging
import os
import signal
import socket
from collections.abc import Callable
from typing import Any

import click

from core.logs import configure_logging
from core.settings import (
    Settings,
    SettingsError,
    database_location,
    deprecation_warnings,
    load_settings,
    sqlite_path,
)

POINT_AT_IT = "run it where `vouch serve` runs, or set VOUCH_DATA_DIR (or VOUCH_DATABASE_URL) to the service's"


def settings_or_exit() -> Settings:
    """The settings from the environment, or the command's end with why they are wrong."""
    try:
        return load_settings()
    except SettingsError as exc:
        raise click.ClickException(str(exc)) from None


def operator_settings_or_exit() -> Settings:
    """The settings for a command that works on an existing database (`vouch users`, `keys`, `webhooks`): where
    the environment names a SQLite file that is not there, one line saying which and how to point at the right
    one, and nothing made on disk (no stray data directory in whatever directory the command ran from)."""
    try:
        _, database_url = database_location()
    except SettingsError as exc:
        raise click.ClickException(str(exc)) from None
    path = sqlite_path(database_url)
    if path is not None and not path.is_file():
        raise click.ClickException(f"no Vouch database at {path}: {POINT_AT_IT}")
    return settings_or_exit()


def database_problem(settings: Settings, error: Exception) -> str:
    """One line for a database the command could not use (not Vouch's, not migrated, refusing us)."""
    from sqlalchemy.engine import make_url

    path = sqlite_path(settings.database_url)
    where = str(path) if path else make_url(settings.database_url).render_as_string(hide_password=True)
    cause = str(getattr(error, "orig", None) or error).strip().splitlines()[0]
    return f"the database at {where} is not usable ({cause}); {POINT_AT_IT}, then `vouch db upgrade`"


def _event_loop_factory() -> Callable[[], asyncio.AbstractEventLoop] | None:
    """uvloop where it is installed (uvicorn[standard] brings it where it builds), as uvicorn picks it for the web
    process: a worker then spends on its loop what the web process does (a claim's wake-up to its statement,
    bench/README.md)."""
    try:
        import uvloop
    except ImportError:
        return None
    return uvloop.new_event_loop


def _log_setup(settings: Settings | None = None) -> None:
    """Logging for a long-running command, then, once per start, what its environment uses that is deprecated."""
    configure_logging(logging.INFO, settings.log_format if settings is not None else "text")
    for message in deprecation_warnings(os.environ):
        logging.getLogger("core.settings").warning(message)


class _LazyGroup(click.Group):
    """A group whose subcommands named in `lazy` ("module:attribute") are imported when first asked for."""

    def __init__(self, *args: Any, lazy: dict[str, str], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._lazy = lazy

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *self._lazy})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name in self.commands or cmd_name not in self._lazy:
            return super().get_command(ctx, cmd_name)
        module, _, attribute = self._lazy[cmd_name].partition(":")
        command = getattr(importlib.import_module(module), attribute)
        if not isinstance(command, click.Command):
            raise TypeError(f"{self._lazy[cmd_name]} is not a click command")
        self.add_command(command, cmd_name)
        return command


@click.group(
    cls=_LazyGroup,
    lazy={
        # A caller's commands, which speak to a server over its API.
        "tasks": "vouch_client.cli:tasks",
        "checkpoints": "vouch_client.cli:checkpoints",
        "suites": "vouch_client.cli_suites:suites",
        # An operator's, which write to the database.
        "users": "api.cli_accounts:users",
        "keys": "api.cli_accounts:keys",
        "webhooks": "api.cli_accounts:webhooks",
    },
)
def main() -> None:
    """Vouch: evaluation tasks run by AI agents, vouched for by humans."""


@main.group()
def db() -> None:
    """Database schema."""


@db.command("upgrade")
@click.option("--revision", default="head", show_default=True)
def db_upgrade(revision: str) -> None:
    """Migrate the database schema."""
    from core.migrate import upgrade

    upgrade(settings_or_exit().database_url, revision)
    click.echo(f"database at {revision}", err=True)


def listening_socket(host: str, port: int) -> socket.socket:
    """The server's socket, bound before anything else starts; a taken port or an address this machine does not
    have ends the command with one line and exit code 1, not a traceback after the start-up banner."""
    try:
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM)
    except OSError as exc:
        raise click.ClickException(f"cannot listen on {host}:{port}: {exc.strerror}") from None
    # As uvicorn does: a restart may rebind at once while old connections linger in TIME_WAIT.
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
        sock.listen(2048)
    except OSError as exc:
        sock.close()
        if exc.errno == errno.EADDRINUSE:
            raise click.ClickException(
                f"port {port} on {host} is already in use (another Vouch?); choose another with --port"
            ) from None
        raise click.ClickException(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
    sock.set_inheritable(True)
    return sock


def _serve(settings: Settings, sock: socket.socket, run_worker: bool) -> None:
    from api.app import create_asgi_app

    _log_setup(settings)
    host, port = sock.getsockname()[:2]
    # The in-process worker's agent tools must not reach this server, whatever their allow-list says; links in
    # mail follow this address unless VOUCH_BASE_URL names another (Settings.public_base_url).
    settings = settings.with_changes(listen_address=(host, port))
    if not settings.secure_cookies:
        click.echo(clear_text_warning(settings), err=True)
    app = create_asgi_app(settings, run_worker=run_worker, server_process=True)
    run_web_server(app, settings, sock, started=f"Sign in at {settings.public_base_url()}/signin")


def clear_text_warning(settings: Settings) -> str:
    return (
        f"Warning: {settings.public_base_url()} is plain http at an address other than this machine's loopback: "
        "sign-in sessions travel in clear text, and the cookies go without __Host- and Secure (browsers keep no "
        "Secure cookie there). Put the service behind HTTPS (a reverse proxy such as Caddy or nginx terminating "
        "TLS) and set VOUCH_BASE_URL=https://your.host (docs/operations.md, 'Behind HTTPS')."
    )


GRACEFUL_STOP_SECONDS = 65


def run_web_server(app: Any, settings: Settings, sock: socket.socket, *, started: str | None = None) -> None:
    """Serve an ASGI app under uvicorn on a bound socket, as every web process does (`vouch serve`, `vouch web`,
    the bench's); `started` is said on stderr once it accepts connections."""
    import uvicorn

    from chat._uvicorn_shortcuts import QuietServer

    # JSON logs: uvicorn's own loggers keep no handlers of their own and go through ours (log_config=None).
    log_config = uvicorn.config.LOGGING_CONFIG if settings.log_format == "text" else None
    config = uvicorn.Config(
        app, log_level="info", lifespan="on", ws="websockets-sansio", log_config=log_config,
        access_log=False,  # api/operations.py logs each request once, with its id, route and time
        # A stop lets requests in flight finish, but not forever: a REST long-poll ends within 60 s, an MCP
        # request_approval only at its decision. Cut after this, the agent calls again with the same key (safe).
        timeout_graceful_shutdown=GRACEFUL_STOP_SECONDS,
    )  # fmt: skip

    class Server(QuietServer):
        async def startup(self, sockets: list[socket.socket] | None = None) -> None:
            await super().startup(sockets)
            if started is not None and self.started:
                click.echo(started, err=True)

    Server(config).run(sockets=[sock])


@main.command()
@click.option("--host", default="127.0.0.1", show_default=True, help="The address to listen on (0.0.0.0: all).")
@click.option("--port", default=8000, show_default=True, type=int)
def serve(host: str, port: int) -> None:
    """The web app and an in-process worker: the whole service in one process."""
    from core.migrate import upgrade

    settings = settings_or_exit()
    sock = listening_socket(host, port)
    upgrade(settings.database_url)
    click.echo(f"Vouch on http://{host}:{port}  (database {settings.database_url.split('://')[0]})", err=True)
    click.echo(agent_line(settings.agent_model), err=True)
    _serve(settings, sock, run_worker=True)


def agent_line(model: str) -> str:
    """What runs tasks that name no `agentModel`: said at start-up, so nobody mistakes the rules for a model."""
    if model == "offline":
        return (
            "Default agent: offline (rule-based, no language model): it carries out only the small vocabulary in "
            "docs/agents.md ('The offline agent') and fails any other task with task_not_understood. To use a "
            "model, set VOUCH_AGENT_MODEL (a profile of VOUCH_MODELS_FILE, openai:<model> or anthropic:<model>; "
            "docs/agents.md 'Model profiles')."
        )
    return f"Default agent: {model} (model); tasks may name another with agentModel."


@main.command()
@click.option("--host", default="127.0.0.1", show_default=True, help="The address to listen on (0.0.0.0: all).")
@click.option("--port", default=8000, show_default=True, type=int)
def web(host: str, port: int) -> None:
    """The web app alone (Procfile `web`); run workers with `vouch worker`."""
    settings = settings_or_exit()
    _serve(settings, listening_socket(host, port), run_worker=False)


@main.command()
def worker() -> None:
    """A worker process (Procfile `worker`): claims and runs executions until SIGTERM."""
    from agents.worker import Worker
    from core.bus import make_bus
    from core.db import Database

    settings = settings_or_exit()
    _log_setup(settings)

    async def run() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        bus = make_bus(settings.redis_url)
        database = Database(settings.database_url, bus, traces=settings.otel_traces_endpoint is not None)
        emitter = None
        if settings.redis_url:
            # Chat watchers sit on the web processes: this worker's events reach them through Redis, on the
            # bus's connection.
            from chat.fanout import WorkerEmitter
            from core.redis_bus import RedisBus

            assert isinstance(bus, RedisBus)  # make_bus's choice for a Redis URL
            emitter = WorkerEmitter(settings.redis_url, bus.publisher)
            database.add_event_sink(emitter.sink)
        from core.heap import freeze_start_up

        freeze_start_up()
        try:
            await Worker(settings, database).run(stop)
        finally:
            await database.dispose()
            await bus.close()
            if emitter is not None:
                await emitter.close()

    with asyncio.Runner(loop_factory=_event_loop_factory()) as runner:
        runner.run(run())


