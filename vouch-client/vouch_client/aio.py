"""AsyncClient: the Vouch API for asyncio code (httpx.AsyncClient underneath, python-socketio for live events)."""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import AsyncGenerator, AsyncIterator, Mapping, Sequence
from contextlib import aclosing
from types import TracebackType
from typing import Any, TypeVar

import httpx

from vouch_client import calls, suite_calls
from vouch_client.errors import StreamError, TransportError, VouchError, WaitTimeout
from vouch_client.external import AsyncExternalRun
from vouch_client.models import (
    CreatedTask,
    DecisionAnswer,
    Event,
    ExecutionPage,
    ExecutionPatch,
    ExecutionSummary,
    StatusRecord,
    TaskSpec,
)
from vouch_client.suite_calls import ExportFormat, SuiteExport
from vouch_client.suite_models import CreatedSuite, Suite, SuitePage, SuiteRun, SuiteRunPage, SuiteSpec, SuiteSummary

T = TypeVar("T")
log = logging.getLogger("vouch.client")


def settings_from_env(base_url: str | None, api_key: str | None) -> tuple[str, str]:
    """The base URL and key given, else VOUCH_URL and VOUCH_API_KEY."""
    url = (base_url or os.environ.get("VOUCH_URL") or "").rstrip("/")
    key = api_key or os.environ.get("VOUCH_API_KEY") or ""
    if not url:
        raise VouchError("no server address: pass base_url or set VOUCH_URL")
    if not key:
        raise VouchError("no API key: pass api_key or set VOUCH_API_KEY")
    return url, key


class AsyncClient:
    """`async with AsyncClient(url, key) as vouch: created = await vouch.create_task({...})`."""

    def __init__(
        self,
        base_url: str | None = None,
        api_key: str | None = None,
        *,
        timeout: float = 30.0,
        retry: calls.RetryPolicy | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.base_url, self._api_key = settings_from_env(base_url, api_key)
        self.retry = retry or calls.RetryPolicy()
        self._http = httpx.AsyncClient(
            base_url=self.base_url, headers=calls.client_headers(self._api_key), timeout=timeout, transport=transport
        )

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._http.aclose()

    async def _send(self, call: calls.Call[T]) -> T:
        attempt = 0
        while True:
            try:
                response = await self._http.request(**calls.request_of(call))
            except httpx.TransportError as exc:
                pause = self.retry.after_error(call, attempt, exc)
                if pause is None:
                    raise TransportError(f"{call.method} {call.path}: {exc!r}") from exc
            else:
                pause = self.retry.after_response(call, attempt, response)
                if pause is None:
                    return call.answer(response)
            log.debug("retrying %s %s in %.2f s (attempt %d)", call.method, call.path, pause, attempt + 1)
            await asyncio.sleep(pause)
            attempt += 1

    # Bring your own agent (agentModel "external") ---------------------------------------------------------------

    async def start_external(
        self, task: TaskSpec | Mapping[str, Any], *, idempotency_key: str | None = None
    ) -> AsyncExternalRun:
        """Create a task your own agent carries out (`agentModel: "external"`); drive it through the run."""
        spec = dict(task.body()) if isinstance(task, TaskSpec) else dict(task)
        created = await self.create_task({**spec, "agentModel": "external"}, idempotency_key=idempotency_key)
        return AsyncExternalRun(self, created.executionId)

    def attach(self, execution_id: str) -> AsyncExternalRun:
        """An external execution created earlier (by this process before a restart, or by another)."""
        return AsyncExternalRun(self, execution_id)

    # The REST API, one method per route ---------------------------------------------------------------------

    async def create_task(
        self, task: TaskSpec | Mapping[str, Any], *, idempotency_key: str | None = None
    ) -> CreatedTask:
        """Create a task (POST /api/eval/create-task-agent); retried safely under one Idempotency-Key."""
        return await self._send(calls.create_task(task, idempotency_key))

    async def status(self, execution_id: str) -> StatusRecord:
        return await self._send(calls.status(execution_id))

    async def list_executions(
        self, *, status: str | Sequence[str] | None = None, limit: int | None = None, cursor: str | None = None
    ) -> ExecutionPage:
        return await self._send(calls.list_executions(status, limit, cursor))

    async def iter_executions(
        self, *, status: str | Sequence[str] | None = None, page_size: int = 100
    ) -> AsyncIterator[ExecutionSummary]:
        """Every execution, newest first, page after page."""
        cursor: str | None = None
        while True:
            page = await self.list_executions(status=status, limit=page_size, cursor=cursor)
            for item in page.items:
                yield item
            if page.nextCursor is None:
                return
            cursor = page.nextCursor

    async def update(self, execution_id: str, patch: ExecutionPatch | Mapping[str, Any]) -> StatusRecord:
        """Change assignedReviewer and/or webhookUrl of an unfinished execution."""
        return await self._send(calls.update(execution_id, patch))

    async def cancel(self, execution_id: str) -> StatusRecord:
        return await self._send(calls.cancel(execution_id))

    async def delete(self, execution_id: str) -> None:
        await self._send(calls.delete(execution_id))

    async def decide(
        self,
        execution_id: str,
        checkpoint_id: str,
        decision: str,
        comment: str = "",
        edited_args: Mapping[str, Any] | None = None,
        *,
        rating: int | None = None,
        labels: Sequence[str] | None = None,
    ) -> DecisionAnswer:
        """Approve or reject a checkpoint (the key's user must be its reviewer; eval:manage). A rejection needs a
        comment; an approval may change arguments of the checkpoint's tool call (`edited_args`). `rating` (1-5)
        and `labels` are an optional grade of what the reviewer saw, kept with the decision."""
        return await self._send(
            calls.decide(execution_id, checkpoint_id, decision, comment, edited_args, rating, labels)
        )

    async def grade(
        self,
        execution_id: str,
        passed: bool,
        *,
        rating: int | None = None,
        labels: Sequence[str] | None = None,
        comment: str = "",
    ) -> DecisionAnswer:
        """Grade a completed run's result (its `human` scorer; the key's user must be its reviewer): pass or fail,
        an optional 1-5 rating, labels and a comment. The run's verdict is recorded with it."""
        return await self._send(calls.grade(execution_id, passed, rating, labels, comment))

    # Suites: the same tasks across models, repeats and test modes -----------------------------------------------

    async def create_suite(
        self, suite: SuiteSpec | Mapping[str, Any], *, idempotency_key: str | None = None
    ) -> CreatedSuite:
        """Start a suite (POST /api/eval/suites): every task x model x repeat (x both test modes) as a run, started
        within the key's concurrency limit; retried safely under one Idempotency-Key."""
        return await self._send(suite_calls.create_suite(suite, idempotency_key))

    async def suite(self, suite_id: str) -> Suite:
        """Progress and per model results (pass rate with its interval, intervention rate, review waits, cost);
        the runs themselves: `suite_runs`, `iter_suite_runs`."""
        return await self._send(suite_calls.suite(suite_id))

    async def suite_runs(self, suite_id: str, *, limit: int | None = None, cursor: str | None = None) -> SuiteRunPage:
        """A page of the suite's runs, in its order (at most 500)."""
        return await self._send(suite_calls.suite_runs(suite_id, limit, cursor))

    async def iter_suite_runs(self, suite_id: str, *, page_size: int = 500) -> AsyncIterator[SuiteRun]:
        """Every run of the suite, in its order, page after page."""
        cursor: str | None = None
        while True:
            page = await self.suite_runs(suite_id, limit=page_size, cursor=cursor)
            for item in page.runs:
                yield item
            if page.nextCursor is None:
                return
            cursor = page.nextCursor

    async def suites(self, *, limit: int | None = None, cursor: str | None = None) -> SuitePage:
        return await self._send(suite_calls.suites(limit, cursor))

    async def iter_suites(self, *, page_size: int = 100) -> AsyncIterator[SuiteSummary]:
        """Every suite, newest first, page after page."""
        cursor: str | None = None
        while True:
            page = await self.suites(limit=page_size, cursor=cursor)
            for item in page.suites:
                yield item
            if page.nextCursor is None:
                return
            cursor = page.nextCursor

    async def cancel_suite(self, suite_id: str) -> Suite:
        """Runs not started never start; runs in progress are cancelled."""
        return await self._send(suite_calls.cancel_suite(suite_id))

    async def export_suite(self, suite_id: str, format: ExportFormat = "jsonl") -> SuiteExport:
        """Every run of the suite as JSON lines, CSV, or an Inspect AI eval log (`format="inspect"`)."""
        return await self._send(suite_calls.export_suite(suite_id, format))

    # Live events and waiting ---------------------------------------------------------------------------------

    def stream(
        self, execution_id: str, *, after_seq: int = 0, reconnect_for: float = 30.0
    ) -> AsyncGenerator[Event, None]:
        """The execution's events in seq order, each once, from `after_seq` on; ends after the final one.

        Follows the chat's Socket.IO namespace with this client's key. A dropped connection (a web process
        restarting) is reconnected for up to `reconnect_for` seconds and resumes after the last seq seen.
        """
        # Imported here: the Socket.IO client is half a second of imports that only following needs.
        from vouch_client.live import follow

        return follow(self.base_url, self._api_key, execution_id, after_seq=after_seq, reconnect_for=reconnect_for)

    async def wait(
        self,
        execution_id: str,
        timeout: float | None = None,
        *,
        live: bool = True,
        poll_interval: float = 0.5,
        max_poll_interval: float = 5.0,
    ) -> StatusRecord:
        """Until the execution finishes; its final status record. Raises WaitTimeout after `timeout` seconds.

        Follows the live stream when it can (no request per second while a reviewer thinks), and polls the
        status, slowing down to `max_poll_interval`, when the stream is unavailable or `live` is False."""
        deadline = None if timeout is None else time.monotonic() + timeout
        last = await self.status(execution_id)
        if last.final:
            return last
        if live:
            try:
                async with asyncio.timeout(None if deadline is None else max(0.0, deadline - time.monotonic())):
                    async with aclosing(self.stream(execution_id)) as events:
                        async for event in events:
                            if event.outcome is not None:
                                break
            except TimeoutError:
                last = await self.status(execution_id)
                if last.final:
                    return last
                raise WaitTimeout(execution_id, timeout or 0.0, last.status) from None
            except (StreamError, TransportError) as exc:
                log.info("live stream unavailable (%s); polling the status instead", exc)
        pause = poll_interval
        while True:
            try:
                last = await self.status(execution_id)
            except TransportError as exc:  # a restart or a blip: keep waiting until the deadline
                log.info("status not reachable (%s); trying again", exc)
            if last.final:
                return last
            if deadline is not None and time.monotonic() >= deadline:
                raise WaitTimeout(execution_id, timeout or 0.0, last.status)
            remaining = float("inf") if deadline is None else deadline - time.monotonic()
            await asyncio.sleep(max(0.0, min(pause, remaining)))
            pause = min(max_poll_interval, pause * 1.5)
