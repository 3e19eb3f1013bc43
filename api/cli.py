"""The `vouch` command: run the service and administer it.

This is the composition root: it lives in `api`, the top layer (every way in), so it may start any part; it
imports each lazily. A command loads only what it uses: `vouch keys create` in a script should not pay for the web
app, the worker and the Socket.IO client (two seconds of imports on this machine, where the command's own work takes
a few milliseconds).
"""

from __future__ import annotations

import asyncio
import importlib
import logging
import os
import signal
from collections.abc import Callable
from typing import Any

import click

from core.logs import configure_logging
from core.settings import Settings, SettingsError, deprecation_warnings, load_settings


def settings_or_exit() -> Settings:
    """The settings from the environment, or the command's end with why they are wrong."""
    try:
        return load_settings()
    except SettingsError as exc:
        raise click.ClickException(str(exc)) from None


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


def _serve(settings: Settings, host: str, port: int, run_worker: bool) -> None:
    from api.app import create_asgi_app

    _log_setup(settings)
    # The in-process worker's agent tools must not reach this server, whatever their allow-list says.
    settings = settings.with_changes(listen_address=(host, port))
    run_web_server(create_asgi_app(settings, run_worker=run_worker, server_process=True), settings, host, port)


def run_web_server(app: Any, settings: Settings, host: str, port: int) -> None:
    """Serve an ASGI app under uvicorn as every web process does (`vouch serve`, `vouch web`, the bench's)."""
    import uvicorn

    # JSON logs: uvicorn's own loggers keep no handlers of their own and go through ours (log_config=None).
    log_config = uvicorn.config.LOGGING_CONFIG if settings.log_format == "text" else None
    uvicorn.run(
        app, host=host, port=port, log_level="info", lifespan="on", ws="websockets-sansio", log_config=log_config,
        access_log=False,  # api/operations.py logs each request once, with its id, route and time
    )


@main.command()
@click.option("--host", default="127.0.0.1", show_default=True)
@click.option("--port", default=8000, show_default=True, type=int)
def serve(host: str, port: int) -> None:
    """The web app and an in-process worker: the whole service in one process."""
    from core.migrate import upgrade

    settings = settings_or_exit()
    upgrade(settings.database_url)
    click.echo(f"Vouch on http://{host}:{port}  (database {settings.database_url.split('://')[0]})", err=True)
    click.echo(agent_line(settings.agent_model), err=True)
    _serve(settings, host, port, run_worker=True)


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
@click.option("--host", default="127.0.0.1", show_default=True)
@click.option("--port", default=8000, show_default=True, type=int)
def web(host: str, port: int) -> None:
    """The web app alone (Procfile `web`); run workers with `vouch worker`."""
    _serve(settings_or_exit(), host, port, run_worker=False)


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


