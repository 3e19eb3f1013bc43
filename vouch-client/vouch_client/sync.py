"""Client: the Vouch API for plain scripts and notebooks (httpx.Client underneath).

Live following (stream, wait) is asyncio code; the sync client runs it on an event loop of its own in a
background thread, so it works the same inside a notebook whose own loop is already running.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import AsyncGenerator, Coroutine, Iterator, Mapping, Sequence
from concurrent.futures import Future
from types import TracebackType
from typing import Any, TypeVar

import httpx

from vouch_client import calls, suite_calls
from vouch_client.aio import AsyncClient, log, settings_from_env
from vouch_client.errors import TransportError
from vouch_client.external import ExternalRun
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


class _LoopThread:
    """An event loop running in a daemon thread, for the async parts."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="vouch-client-loop", daemon=True)
        self.thread.start()

    def run(self, work: Coroutine[Any, Any, T]) -> T:
        future: Future[T] = asyncio.run_coroutine_threadsafe(work, self.loop)
        try:
            return future.result()
        except BaseException:
            future.cancel()  # Ctrl-C in the caller's thread stops the work in ours too
            raise

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout=10)
        self.loop.close()


class Client:
    """`with Client(url, key) as vouch: vouch.wait(vouch.create_task({...}).executionId, timeout=600)`.

    `base_url` and `api_key` default to VOUCH_URL and VOUCH_API_KEY."""

    def __init__(
        self,
        base_url: str | None = None,
        api_key: str | None = None,
        *,
        timeout: float = 30.0,
        retry: calls.RetryPolicy | None = None,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self.base_url, self._api_key = settings_from_env(base_url, api_key)
        self.retry = retry or calls.RetryPolicy()
        self._timeout = timeout
        self._http = httpx.Client(
            base_url=self.base_url, headers=calls.client_headers(self._api_key), timeout=timeout, transport=transport
        )
        self._loop: _LoopThread | None = None
        self._async: AsyncClient | None = None

    def __enter__(self) -> Client:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        self.close()

    def close(self) -> None:
        self._http.close()
        if self._loop is not None:
            if self._async is not None:
                self._loop.run(self._async.aclose())
            self._loop.close()
            self._loop = self._async = None

    def _send(self, call: calls.Call[T]) -> T:
        attempt = 0
        while True:
            try:
                response = self._http.request(**calls.request_of(call))
            except httpx.TransportError as exc:
                pause = self.retry.after_error(call, attempt, exc)
                if pause is None:
                    raise TransportError(f"{call.method} {call.path}: {exc!r}") from exc
            else:
                pause = self.retry.after_response(call, attempt, response)
                if pause is None:
                    return call.answer(response)
            log.debug("retrying %s %s in %.2f s (attempt %d)", call.method, call.path, pause, attempt + 1)
            time.sleep(pause)
            attempt += 1

    def _aio(self) -> tuple[_LoopThread, AsyncClient]:
        if self._loop is None or self._async is None:
            self._loop = _LoopThread()

            async def make() -> AsyncClient:  # httpx.AsyncClient belongs to the loop it is made in
                return AsyncClient(self.base_url, self._api_key, timeout=self._timeout, retry=self.retry)

            self._async = self._loop.run(make())
        return self._loop, self._async

    # Bring your own agent (agentModel "external") ---------------------------------------------------------------

    def start_external(
        self, task: TaskSpec | Mapping[str, Any], *, idempotency_key: str | None = None
    ) -> ExternalRun:
        """Create a task your own agent carries out (`agentModel: "external"`); drive it through the run."""
        spec = dict(task.body()) if isinstance(task, TaskSpec) else dict(task)
        created = self.create_task({**spec, "agentModel": "external"}, idempotency_key=idempotency_key)
        return ExternalRun(self, created.executionId)

    def attach(self, execution_id: str) -> ExternalRun:
        """An external execution created earlier (by this process before a restart, or by another)."""
        return ExternalRun(self, execution_id)

    # The REST API, one method per route ---------------------------------------------------------------------

    def create_task(self, task: TaskSpec | Mapping[str, Any], *, idempotency_key: str | None = None) -> CreatedTask:
        """Create a task (POST /api/eval/create-task-agent); retried safely under one Idempotency-Key."""
        return self._send(calls.create_task(task, idempotency_key))

    def status(self, execution_id: str) -> StatusRecord:
        return self._send(calls.status(execution_id))

    def list_executions(
        self, *, status: str | Sequence[str] | None = None, limit: int | None = None, cursor: str | None = None
    ) -> ExecutionPage:
        return self._send(calls.list_executions(status, limit, cursor))

    def iter_executions(
        self, *, status: str | Sequence[str] | None = None, page_size: int = 100
    ) -> Iterator[ExecutionSummary]:
        """Every execution, newest first, page after page."""
        cursor: str | None = None
        while True:
            page = self.list_executions(status=status, limit=page_size, cursor=cursor)
            yield from page.items
            if page.nextCursor is None:
                return
            cursor = page.nextCursor

    def update(self, execution_id: str, patch: ExecutionPatch | Mapping[str, Any]) -> StatusRecord:
        """Change assignedReviewer and/or webhookUrl of an unfinished execution."""
        return self._send(calls.update(execution_id, patch))

    def cancel(self, execution_id: str) -> StatusRecord:
        return self._send(calls.cancel(execution_id))

    def delete(self, execution_id: str) -> None:
        self._send(calls.delete(execution_id))

    def decide(
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
        return self._send(
            calls.decide(execution_id, checkpoint_id, decision, comment, edited_args, rating, labels)
        )

    def grade(
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
        return self._send(calls.grade(execution_id, passed, rating, labels, comment))

    # Suites: the same tasks across models, repeats and test modes -----------------------------------------------

    def create_suite(
        self, suite: SuiteSpec | Mapping[str, Any], *, idempotency_key: str | None = None
    ) -> CreatedSuite:
        """Start a suite (POST /api/eval/suites): every task x model x repeat (x both test modes) as a run, started
        within the key's concurrency limit; retried safely under one Idempotency-Key."""
        return self._send(suite_calls.create_suite(suite, idempotency_key))

    def suite(self, suite_id: str) -> Suite:
        """Progress and per model results (pass rate with its interval, intervention rate, review waits, cost);
        the runs themselves: `suite_runs`, `iter_suite_runs`."""
        return self._send(suite_calls.suite(suite_id))

    def suite_runs(self, suite_id: str, *, limit: int | None = None, cursor: str | None = None) -> SuiteRunPage:
        """A page of the suite's runs, in its order (at most 500)."""
        return self._send(suite_calls.suite_runs(suite_id, limit, cursor))

    def iter_suite_runs(self, suite_id: str, *, page_size: int = 500) -> Iterator[SuiteRun]:
        """Every run of the suite, in its order, page after page."""
        cursor: str | None = None
        while True:
            page = self.suite_runs(suite_id, limit=page_size, cursor=cursor)
            yield from page.runs
            if page.nextCursor is None:
                return
            cursor = page.nextCursor

    def suites(self, *, limit: int | None = None, cursor: str | None = None) -> SuitePage:
        return self._send(suite_calls.suites(limit, cursor))

    def iter_suites(self, *, page_size: int = 100) -> Iterator[SuiteSummary]:
        """Every suite, newest first, page after page."""
        cursor: str | None = None
        while True:
            page = self.suites(limit=page_size, cursor=cursor)
            yield from page.suites
            if page.nextCursor is None:
                return
            cursor = page.nextCursor

    def cancel_suite(self, suite_id: str) -> Suite:
        """Runs not started never start; runs in progress are cancelled."""
        return self._send(suite_calls.cancel_suite(suite_id))

    def export_suite(self, suite_id: str, format: ExportFormat = "jsonl") -> SuiteExport:
        """Every run of the suite as JSON lines, CSV, or an Inspect AI eval log (`format="inspect"`)."""
        return self._send(suite_calls.export_suite(suite_id, format))

    # Live events and waiting ---------------------------------------------------------------------------------

    def stream(self, execution_id: str, *, after_seq: int = 0, reconnect_for: float = 30.0) -> Iterator[Event]:
        """The execution's events in seq order, each once, from `after_seq` on; ends after the final one."""
        loop, client = self._aio()
        events: AsyncGenerator[Event, None] = client.stream(
            execution_id, after_seq=after_seq, reconnect_for=reconnect_for
        )

        async def step() -> Event | None:
            try:
                return await anext(events)
            except StopAsyncIteration:
                return None

        try:
            while (event := loop.run(step())) is not None:
                yield event
        finally:
            loop.run(events.aclose())

    def wait(
        self, execution_id: str, timeout: float | None = None, *, live: bool = True, poll_interval: float = 0.5
    ) -> StatusRecord:
        """Until the execution finishes; its final status record. Raises WaitTimeout after `timeout` seconds."""
        loop, client = self._aio()
        return loop.run(client.wait(execution_id, timeout, live=live, poll_interval=poll_interval))
