"""`vouch suites …`: run the same tasks across models and gate a CI job on the pass rate.

    vouch suites run suite.yaml                              prints the suite's id (and its page's address)
    vouch suites run suite.yaml --watch --min-pass-rate 0.9  a progress bar per model, then a table, then the gate

suite.yaml holds the POST /api/eval/suites body: name, tasks (create bodies), models, repeats, testMode.

Exit codes (besides cli.py's 4, 5, 6 and 64): with --watch, 0 when the suite completed and, with
--min-pass-rate, every model (in each test mode) passed at least that share of its scored runs; 1 when one did not
(a model with no scored run does not); 3 when the suite was cancelled.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from pathlib import Path
from typing import Any, TextIO

import click
from pydantic import ValidationError

from vouch_client.aio import AsyncClient
from vouch_client.cli_base import (
    EXIT_CODES,
    BadUsage,
    CallerGroup,
    TimedOut,
    connection_options,
    invalid,
    read_document,
    run,
)
from vouch_client.errors import TransportError
from vouch_client.suite_models import Suite, SuiteSpec
from vouch_client.suite_view import SuiteView, gate, headline, table
from vouch_client.terminal import colour_wanted

EXIT_BELOW_PASS_RATE = 1
EXIT_INTERRUPTED = 130  # as a shell reports a command stopped by Ctrl-C
# How often the bars are read again: every second where someone watches, less often into a CI log.
TTY_INTERVAL, LOG_INTERVAL = 1.0, 5.0


@connection_options
@click.group(cls=CallerGroup)
@click.pass_context
def suites(ctx: click.Context, url: str | None, api_key: str | None) -> None:
    """Run the same tasks across models, repeats and test modes, and compare them."""
    ctx.obj = {"url": url, "api_key": api_key}


def _read_suite(path: str) -> SuiteSpec:
    data = read_document(path, "suite object (name, tasks, models, repeats, testMode)")
    try:
        return SuiteSpec.model_validate(data)
    except ValidationError as exc:
        raise invalid(path, exc, "suite") from None


async def follow(client: AsyncClient, suite_id: str, *, out: TextIO, timeout: float | None) -> Suite:
    """Redraw the suite's progress until it finishes; TimedOut (exit 4) after `timeout` seconds."""
    tty = out.isatty()
    view = SuiteView(out, tty=tty, colour=colour_wanted(out))
    interval = TTY_INTERVAL if tty else LOG_INTERVAL
    deadline = None if timeout is None else time.monotonic() + timeout
    last: Suite | None = None
    while True:
        try:
            last = await client.suite(suite_id)
            # The bars count every run by its state: a terminal's drawing needs the runs, a log's line does not.
            runs = [run async for run in client.iter_suite_runs(suite_id)] if tty else []
        except TransportError as exc:  # a restarting server: the suite runs on; keep watching until the deadline
            view.note(f"! {exc}; trying again")
        else:
            view.show(last, runs)
            if last.final:
                return last
        remaining = None if deadline is None else deadline - time.monotonic()
        if remaining is not None and remaining <= 0:
            said = last.status if last else "unknown"
            raise TimedOut(f"suite {suite_id} not finished after {timeout or 0:g} s (last status: {said})")
        await asyncio.sleep(interval if remaining is None else min(interval, remaining))


def _report(suite: Suite, minimum: float | None) -> int:
    """The final table and, with a minimum, the gate; the exit code they come to."""
    colour = colour_wanted(sys.stdout)
    click.echo("")
    click.echo("\n".join(table(suite, colour)))
    if suite.status == "cancelled":
        click.echo("The suite was cancelled: runs that had not finished never will.")
        return EXIT_CODES["cancelled"]
    if minimum is None:
        return 0
    ok, lines = gate(suite, minimum, colour)
    click.echo("")
    click.echo("\n".join(lines))
    return 0 if ok else EXIT_BELOW_PASS_RATE


def _watch_and_report(ctx: click.Context, client_work: Any, minimum: float | None, timeout: float | None) -> None:
    suite_id: list[str] = []

    async def work(client: AsyncClient) -> Suite:
        found: str = await client_work(client)
        suite_id.append(found)
        return await follow(client, found, out=sys.stdout, timeout=timeout)

    try:
        final = run(ctx, work)
    except KeyboardInterrupt:
        if suite_id:
            click.echo(f"\nStopped watching; the suite runs on (vouch suites cancel {suite_id[0]})", err=True)
        ctx.exit(EXIT_INTERRUPTED)
    ctx.exit(_report(final, minimum))


def _minimum_option(command: Any) -> Any:
    command = click.option(
        "--timeout", type=click.FloatRange(min=0), help="Give up waiting after this many seconds (exit code 4)."
    )(command)
    return click.option(
        "--min-pass-rate",
        "minimum",
        type=click.FloatRange(0, 1),
        help="With --watch: exit 0 only when every model passed at least this share (0-1) of its scored runs.",
    )(command)


@suites.command("run")
@click.argument("path", metavar="SUITE_FILE")
@click.option("--watch", "watching", is_flag=True, help="Follow it: a progress bar per model, then a table.")
@_minimum_option
@click.pass_context
def suites_run(
    ctx: click.Context, path: str, watching: bool, minimum: float | None, timeout: float | None
) -> None:
    """Start a suite from a JSON or YAML file (- for stdin); prints its id and page, or follows it with --watch."""
    if not watching and (minimum is not None or timeout is not None):
        raise click.UsageError("--min-pass-rate and --timeout go with --watch: they need the finished suite")
    spec = _read_suite(path)

    async def create(client: AsyncClient) -> str:
        created = await client.create_suite(spec)
        if not watching:
            click.echo(created.suiteId)
        click.echo(f"Suite {created.name}: {created.runs} runs · {created.url}", err=not watching)
        return created.suiteId

    if watching:
        _watch_and_report(ctx, create, minimum, timeout)
    else:
        run(ctx, create)


@suites.command("watch")
@click.argument("suite_id")
@_minimum_option
@click.pass_context
def suites_watch(ctx: click.Context, suite_id: str, minimum: float | None, timeout: float | None) -> None:
    """Follow a suite started earlier, as `run --watch` does."""

    async def found(client: AsyncClient) -> str:
        return suite_id

    _watch_and_report(ctx, found, minimum, timeout)


@suites.command("status")
@click.argument("suite_id")
@click.option("--json", "as_json", is_flag=True, help="Print the suite as JSON, as the API answers it.")
@click.pass_context
def suites_status(ctx: click.Context, suite_id: str, as_json: bool) -> None:
    """Where a suite stands, and its table per model (exit 0 whatever its state)."""
    suite = run(ctx, lambda client: client.suite(suite_id))
    if as_json:
        click.echo(json.dumps(suite.model_dump(mode="json"), indent=2))
        return
    click.echo(headline(suite))
    click.echo("\n".join(table(suite, colour_wanted(sys.stdout))))


@suites.command("list")
@click.option("--limit", type=click.IntRange(1, 100), default=20, show_default=True)
@click.pass_context
def suites_list(ctx: click.Context, limit: int) -> None:
    """Your suites, newest first."""
    page = run(ctx, lambda client: client.suites(limit=limit))
    for item in page.suites:
        p = item.progress
        created = item.createdAt.isoformat(timespec="seconds")
        click.echo(f"{item.suiteId}  {item.status:<9}  {p.finished}/{p.total}  {created}  {item.name}")
    if page.nextCursor:
        click.echo(f"(more: raise --limit, or page with the API's cursor {page.nextCursor})", err=True)


@suites.command("cancel")
@click.argument("suite_id")
@click.pass_context
def suites_cancel(ctx: click.Context, suite_id: str) -> None:
    """Stop a suite: runs not started never start, runs in progress are cancelled."""
    suite = run(ctx, lambda client: client.cancel_suite(suite_id))
    click.echo(f"{suite.suiteId} {suite.status}")


@suites.command("export")
@click.argument("suite_id")
@click.option("--format", "kind", type=click.Choice(["jsonl", "csv", "inspect"]), default="jsonl", show_default=True)
@click.option("--output", "-o", "output", help="Write to this file (default: stdout).")
@click.pass_context
def suites_export(ctx: click.Context, suite_id: str, kind: Any, output: str | None) -> None:
    """Every run as JSON lines, CSV, or an Inspect AI eval log (`inspect view` opens it)."""
    exported = run(ctx, lambda client: client.export_suite(suite_id, kind))
    if output is None:
        sys.stdout.buffer.write(exported.content)
        sys.stdout.flush()
        return
    try:
        Path(output).write_bytes(exported.content)
    except OSError as exc:
        raise BadUsage(f"cannot write {output}: {exc.strerror}") from None
    click.echo(f"{len(exported.content)} bytes to {output}", err=True)
