"""`vouch tasks watch`: follow a run live in the terminal and answer its checkpoints in place.

Events and typed lines are awaited together, so the view keeps moving while a prompt waits. A prompt appears
only for a checkpoint the status says is waiting now (a replayed card that was decided long ago asks nothing),
only when both stdin and stdout are a terminal, and answers through the API's decision route. The first
refusal (the key is not the reviewer's, or lacks eval:manage) is shown once and no further prompt appears.

Answers: `a [comment]` approves, `r <comment>` rejects (the agent revises from the comment; `r` alone asks for
it), `s` skips this checkpoint (decide elsewhere; the view keeps following).
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
import time
from collections.abc import AsyncGenerator
from typing import Any, TextIO

from vouch_client.aio import AsyncClient
from vouch_client.errors import ApiError, StreamError, WaitTimeout
from vouch_client.models import Event, StatusRecord
from vouch_client.terminal import LiveView, colour_wanted

PROMPT = "Checkpoint {stage}: {question} — [a]pprove, [r]eject <comment>, [s]kip > "
REASON_PROMPT = "Why reject? (the agent revises from your comment) > "


class _Lines:
    """Lines typed on stdin, without blocking the loop (a terminal's fd is readable once a line is complete)."""

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream
        self.queue: asyncio.Queue[str | None] = asyncio.Queue()
        self.loop = asyncio.get_running_loop()
        self.loop.add_reader(stream.fileno(), self._ready)

    def _ready(self) -> None:
        line = self.stream.readline()
        if not line:  # end of input: no more answers can come
            self.loop.remove_reader(self.stream.fileno())
            self.queue.put_nowait(None)
            return
        self.queue.put_nowait(line.strip())

    def close(self) -> None:
        self.loop.remove_reader(self.stream.fileno())


class _Watch:
    def __init__(self, client: AsyncClient, view: LiveView, lines: _Lines | None) -> None:
        self.client = client
        self.view = view
        self.lines = lines
        self.asking: dict[str, Any] | None = None  # the card being asked about, and the answer so far
        self.may_ask = lines is not None

    async def card(self, event: Event) -> None:
        if not self.may_ask or self.asking is not None:
            return
        status = await self.client.status(self.view.execution_id)
        waiting = status.waiting_checkpoint()
        if waiting is None or waiting.checkpointId != event.payload.get("checkpointId"):
            return  # decided already (a replayed card), or another one is next
        self.asking = {"id": waiting.checkpointId, "decision": None}
        self.view.ask(PROMPT.format(stage=waiting.stage, question=waiting.verificationQuestion))

    def decided(self, event: Event) -> None:
        if self.asking is not None and event.payload.get("checkpointId") == self.asking["id"]:
            self.asking = None  # answered elsewhere (or by us): the prompt goes
            self.view.ask(None)

    async def answer(self, line: str) -> None:
        if self.asking is None:
            return
        if self.asking["decision"] == "reject":
            if line:
                await self._decide("reject", line)
            return
        word, _, comment = line.partition(" ")
        match word.lower():
            case "a" | "approve":
                await self._decide("approve", comment.strip())
            case "r" | "reject" if comment.strip():
                await self._decide("reject", comment.strip())
            case "r" | "reject":
                self.asking["decision"] = "reject"
                self.view.ask(REASON_PROMPT)
            case "s" | "skip":
                self.asking = None
                self.view.ask(None)
                self.view.line("· Skipped: decide by e-mail, on the web, or with `vouch checkpoints decide`")
            case _:
                self.view.redraw()

    async def _decide(self, decision: str, comment: str) -> None:
        assert self.asking is not None
        checkpoint_id = self.asking["id"]
        self.asking = None
        self.view.ask(None)
        try:
            await self.client.decide(self.view.execution_id, checkpoint_id, decision, comment)
        except ApiError as exc:
            self.view.line(f"! Not decided: {exc.detail}")
            if exc.status == 403:
                self.may_ask = False  # this key may not decide here; asking again would only fail again

    async def run(self, events: AsyncGenerator[Event, None]) -> None:
        next_event: asyncio.Task[Event] = asyncio.ensure_future(anext(events))
        next_line: asyncio.Task[str | None] | None = None
        try:
            while True:
                if self.lines is not None and next_line is None:
                    next_line = asyncio.ensure_future(self.lines.queue.get())
                waiting: set[asyncio.Future[Any]] = {next_event} | ({next_line} if next_line else set())
                done, _ = await asyncio.wait(waiting, timeout=1.0, return_when=asyncio.FIRST_COMPLETED)
                if not done:
                    if self.asking is None:
                        self.view.redraw()  # the elapsed time moves on; not while someone types
                    continue
                if next_line is not None and next_line in done:
                    line, next_line = next_line.result(), None
                    if line is None:
                        self.lines = None
                        self.may_ask = False
                    else:
                        await self.answer(line)
                if next_event in done:
                    try:
                        event = next_event.result()
                    except StopAsyncIteration:
                        return
                    self.view.event(event)
                    if event.type == "checkpoint.awaiting_review":
                        await self.card(event)
                    elif event.type in ("checkpoint.decided", "checkpoint.revision_requested"):
                        self.decided(event)
                    if event.outcome is not None:
                        return
                    next_event = asyncio.ensure_future(anext(events))
        finally:
            for task in (next_event, next_line):
                if task is not None and not task.done():
                    task.cancel()
                    with contextlib.suppress(asyncio.CancelledError, StopAsyncIteration):
                        await task


async def watch(
    client: AsyncClient,
    execution_id: str,
    *,
    timeout: float | None = None,
    prompt: bool = True,
    out: TextIO | None = None,
    stdin: TextIO | None = None,
) -> StatusRecord:
    """Show the run until it ends (its final status), or raise WaitTimeout after `timeout` seconds."""
    out = out or sys.stdout
    stdin = stdin or sys.stdin
    tty = out.isatty()
    status = await client.status(execution_id)
    view = LiveView(out, status, tty=tty, colour=colour_wanted(out))
    view.header()
    lines = _Lines(stdin) if prompt and tty and stdin.isatty() else None
    deadline = None if timeout is None else time.monotonic() + timeout
    try:
        async with asyncio.timeout(timeout):
            try:
                events = client.stream(execution_id)
                try:
                    await _Watch(client, view, lines).run(events)
                finally:
                    await events.aclose()
            except StreamError as exc:
                view.line(f"! Live view unavailable ({exc}); polling the status")
                remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
                await client.wait(execution_id, remaining, live=False)
    except TimeoutError:
        last = await client.status(execution_id)
        if not last.final:
            view.line("")
            raise WaitTimeout(execution_id, timeout or 0.0, last.status) from None
    finally:
        if lines is not None:
            lines.close()
    final = await client.status(execution_id)
    view.finish(final)
    return final
