"""The caller's commands: `vouch tasks …`, `vouch checkpoints …` and `vouch suites …` (cli_suites.py), over the
API with an API key.

The server's `vouch` command registers these groups; with only this package installed the same commands are
`vouch-client tasks …` and so on (`main` below).

Configured by VOUCH_URL and VOUCH_API_KEY (or --url / --api-key). Exit codes, so CI jobs can gate on them:

    0  completed (or, for commands that do not wait, success)
    1  failed            2  rejected            3  cancelled
    4  timed out waiting (--timeout)
    5  the API refused the request (its problem detail is printed)
    6  the server could not be reached
    64 usage error: bad flags, a task file that is not valid, no URL or key

Errors are one line on stderr: `vouch: <code>: <detail>`.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from typing import Any, NoReturn

import click
from pydantic import ValidationError

from vouch_client.aio import AsyncClient
from vouch_client.cli_base import (
    EXIT_CODES,
    CallerGroup,
    connection_options,
    invalid,
    read_document,
    run,
)
from vouch_client.cli_suites import suites
from vouch_client.models import StatusRecord, TaskSpec
from vouch_client.terminal import STATUS_TONES, colour_wanted, paint
from vouch_client.watching import watch


def _outcome(status: StatusRecord) -> NoReturn:
    click.get_current_context().exit(EXIT_CODES.get(status.status, 0))


@connection_options
@click.group(cls=CallerGroup)
@click.pass_context
def tasks(ctx: click.Context, url: str | None, api_key: str | None) -> None:
    """Create, follow and manage your evaluation tasks over the API."""
    ctx.obj = {"url": url, "api_key": api_key}


@connection_options
@click.group(cls=CallerGroup)
@click.pass_context
def checkpoints(ctx: click.Context, url: str | None, api_key: str | None) -> None:
    """Answer checkpoints (the key's user must be the assigned reviewer; eval:manage)."""
    ctx.obj = {"url": url, "api_key": api_key}


@click.group(cls=CallerGroup)
def main() -> None:
    """Vouch's caller commands: create, follow and answer evaluation tasks over the API."""


main.add_command(tasks)
main.add_command(checkpoints)
main.add_command(suites)


def _read_task(path: str) -> TaskSpec:
    data = read_document(path, "task object (taskName, taskDescription, …)")
    try:
        return TaskSpec.model_validate(data)
    except ValidationError as exc:
        raise invalid(path, exc, "task") from None


def _watch_options(command: Callable[..., Any]) -> Callable[..., Any]:
    command = click.option(
        "--no-prompt", is_flag=True, help="Never ask to approve or reject, even on a terminal."
    )(command)
    return click.option(
        "--timeout", type=click.FloatRange(min=0), help="Give up waiting after this many seconds (exit code 4)."
    )(command)


@tasks.command("create")
@click.option("--file", "path", required=True, help="The task as JSON or YAML (spec §2.1 fields); - for stdin.")
@click.option("--watch", "follow", is_flag=True, help="Then follow the run live until it ends; exit by its outcome.")
@click.option("--idempotency-key", help="Send this Idempotency-Key (default: a new one per command).")
@_watch_options
@click.pass_context
def tasks_create(
    ctx: click.Context, path: str, follow: bool, idempotency_key: str | None, timeout: float | None, no_prompt: bool
) -> None:
    """Create a task; prints its execution id (and follows it with --watch)."""
    task = _read_task(path)

    async def work(client: AsyncClient) -> StatusRecord | None:
        created = await client.create_task(task, idempotency_key=idempotency_key)
        if not follow:
            click.echo(created.executionId)
            return None
        click.echo(f"created {created.executionId}", err=True)
        return await watch(client, created.executionId, timeout=timeout, prompt=not no_prompt)

    final = run(ctx, work)
    if final is not None:
        _outcome(final)


@tasks.command("watch")
@click.argument("execution_id")
@_watch_options
@click.pass_context
def tasks_watch(ctx: click.Context, execution_id: str, timeout: float | None, no_prompt: bool) -> None:
    """Follow a run live: the conversation, a progress line, and checkpoint prompts you can answer in place."""
    _outcome(run(ctx, lambda client: watch(client, execution_id, timeout=timeout, prompt=not no_prompt)))


@tasks.command("wait")
@click.argument("execution_id")
@click.option("--timeout", type=click.FloatRange(min=0), help="Give up after this many seconds (exit code 4).")
@click.pass_context
def tasks_wait(ctx: click.Context, execution_id: str, timeout: float | None) -> None:
    """Wait quietly until a run ends; prints its final status and exits by its outcome."""
    final = run(ctx, lambda client: client.wait(execution_id, timeout))
    click.echo(final.status)
    _outcome(final)


def _status_lines(status: StatusRecord, colour: bool = False) -> list[str]:
    lines = [
        f"{status.executionId}  {paint(status.status, STATUS_TONES.get(status.status), colour)}  {status.taskName}",
        f"  created {status.createdAt.isoformat()}"
        + (f", finished {status.completedAt.isoformat()}" if status.completedAt else ""),
        f"  {status.metrics.steps} steps, {status.metrics.toolCalls} tool calls, "
        f"{(status.metrics.durationMs or 0) / 1000:.1f} s",
    ]
    for cp in status.checkpoints:
        decided = f" — {cp.decision.decision} by {cp.decision.by} via {cp.decision.via}" if cp.decision else ""
        lines.append(f"  checkpoint {cp.checkpointId} {cp.stage}: {cp.status}{decided}")
    if status.agent is not None:
        lines.insert(1, f"  agent: {status.agent.model} ({status.agent.kind})")
    if status.error:
        lines.append(f"  error: {status.error}")
        lines.extend(f"    not understood: {instruction}" for instruction in status.error.instructions)
    if status.result and status.result.get("summary"):
        lines.append(f"  result: {status.result['summary']}")
    if status.verdict is not None:
        said = {True: "passed", False: "failed", None: "undecided"}[status.verdict.passed]
        score = f", score {status.verdict.score:.2f}" if status.verdict.score is not None else ""
        lines.append(f"  verdict: {said}{score} ({status.verdict.state})")
        lines.extend(
            f"    {s.scorer}: {({True: 'pass', False: 'fail', None: '?'})[s.passed]} — {s.explanation}"
            for s in status.verdict.scores
        )
    return lines


@tasks.command("status")
@click.argument("execution_id")
@click.option("--json", "as_json", is_flag=True, help="Print the status record as JSON, as the API answers it.")
@click.pass_context
def tasks_status(ctx: click.Context, execution_id: str, as_json: bool) -> None:
    """Show where a run stands (exit 0 whatever its state: use `wait` or `watch` to gate on the outcome)."""
    status = run(ctx, lambda client: client.status(execution_id))
    if as_json:
        click.echo(json.dumps(status.model_dump(mode="json"), indent=2))
    else:
        click.echo("\n".join(_status_lines(status, colour_wanted(sys.stdout))))


@tasks.command("list")
@click.option("--status", "statuses", multiple=True, help="Only these statuses (repeatable, or a,b).")
@click.option("--limit", type=click.IntRange(1, 100), default=20, show_default=True)
@click.pass_context
def tasks_list(ctx: click.Context, statuses: tuple[str, ...], limit: int) -> None:
    """Your executions, newest first."""
    page = run(ctx, lambda client: client.list_executions(status=list(statuses) or None, limit=limit))
    colour = colour_wanted(sys.stdout)
    rows = [("EXECUTION", "STATUS", "CREATED", "TASK")] + [
        (item.executionId, item.status, item.createdAt.isoformat(timespec="seconds"), item.taskName)
        for item in page.items
    ]
    widths = [max(len(row[column]) for row in rows) for column in range(3)]
    for number, row in enumerate(rows):
        # Padded before painting: the colour's escape codes take no room on the screen.
        cells = [cell.ljust(width) for cell, width in zip(row[:3], widths, strict=True)]
        cells[1] = paint(cells[1], STATUS_TONES.get(row[1]) if number else None, colour)
        line = "  ".join([*cells, row[3]])
        click.echo(line if number else paint(line, "heading", colour))
    if page.nextCursor:
        click.echo(f"(more: raise --limit, or page with the API's cursor {page.nextCursor})", err=True)


@tasks.command("cancel")
@click.argument("execution_id")
@click.pass_context
def tasks_cancel(ctx: click.Context, execution_id: str) -> None:
    """Cancel a queued, running or waiting run."""
    status = run(ctx, lambda client: client.cancel(execution_id))
    click.echo(f"{status.executionId} {status.status}")


@checkpoints.command("decide")
@click.argument("execution_id")
@click.argument("checkpoint_id")
@click.argument("decision", type=click.Choice(["approve", "reject"]))
@click.option("--comment", default="", help="Why; required to reject: the agent revises from it.")
@click.option(
    "--set",
    "settings",
    multiple=True,
    metavar="NAME=VALUE",
    help="Approve with this argument of the checkpoint's tool call changed (repeatable), e.g. --set subject=\"Hi\".",
)
@click.option("--rating", type=click.IntRange(1, 5), help="An optional 1-5 grade of what you saw.")
@click.option("--label", "labels", multiple=True, help="An optional label (repeatable).")
@click.pass_context
def checkpoints_decide(
    ctx: click.Context,
    execution_id: str,
    checkpoint_id: str,
    decision: str,
    comment: str,
    settings: tuple[str, ...],
    rating: int | None,
    labels: tuple[str, ...],
) -> None:
    """Approve or reject a checkpoint that waits for you."""
    if decision == "reject" and not comment.strip():
        raise click.UsageError("a rejection needs --comment: say what should change")
    if settings and decision != "approve":
        raise click.UsageError("--set goes with approve only: a rejection changes nothing")
    edits: dict[str, str] = {}
    for setting in settings:
        name, equals, value = setting.partition("=")
        if not equals or not name.strip():
            raise click.UsageError(f"--set takes NAME=VALUE, not {setting!r}")
        edits[name.strip()] = value
    answer = run(
        ctx,
        lambda client: client.decide(
            execution_id, checkpoint_id, decision, comment, edits or None, rating=rating, labels=labels or None
        ),
    )
    verdict = answer.decision.decision
    shown = paint(verdict, "ok" if verdict == "approve" else "bad", colour_wanted(sys.stdout))
    click.echo(f"{answer.checkpointId} {shown} by {answer.decision.by} via {answer.decision.via}")
    for name, value in (answer.decision.editedArgs or {}).items():
        click.echo(f"  {name} changed to {value!r}")



@tasks.command("grade")
@click.argument("execution_id")
@click.argument("outcome", type=click.Choice(["pass", "fail"]))
@click.option("--rating", type=click.IntRange(1, 5), help="An optional 1-5 rating.")
@click.option("--label", "labels", multiple=True, help="An optional label (repeatable).")
@click.option("--comment", default="", help="An optional comment: the grade's explanation.")
@click.pass_context
def tasks_grade(
    ctx: click.Context, execution_id: str, outcome: str, rating: int | None, labels: tuple[str, ...], comment: str
) -> None:
    """Grade a completed run's result (its `human` scorer): pass or fail."""
    answer = run(
        ctx,
        lambda client: client.grade(
            execution_id, outcome == "pass", rating=rating, labels=labels or None, comment=comment
        ),
    )
    click.echo(f"{execution_id} graded {outcome} by {answer.decision.by} via {answer.decision.via}")
