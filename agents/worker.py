"""The worker: claims runnable executions and runs them, woken by the bus.

The beat's look (core/looks.py) is the safety net for lost wake-ups and for leases left by dead workers: one
statement every few seconds asks whether this loop or any of the worker's others has something due.
"""

from __future__ import annotations

import asyncio
import functools
import io
import logging
import os
import socket
from collections.abc import Iterable
from typing import Any

from agents.claims import SEARCHABLE, Claim, claim_execution, claim_next, claim_to_take_over
from agents.external_sweep import run_external_sweep
from agents.providers import ModelRegistry
from agents.runner import ExecutionRunner
from agents.scoring import run_scoring
from agents.suite_scheduler import run_suite_scheduler
from core.bus import WAKE_CHANNEL
from core.db import Database
from core.ids import new_id
from core.looks import Looks
from core.mail import run_mail_dispatcher
from core.run_entry import Resume
from core.settings import Settings
from core.webhook_sender import run_webhook_dispatcher
from review.inbound import InboundListener
from review.timers import run_review_timers

log = logging.getLogger(__name__)

# Executions named by wake-ups and kept for claiming by id while the worker is full.
_NAMED_AT_MOST = 1000
# A stop that takes longer than this names, in the log, what it still waits for.
STOP_WARNING_SECONDS = 10.0


def default_worker_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{new_id('w')[-6:]}"


class Worker:
    def __init__(self, settings: Settings, db: Database, worker_id: str | None = None) -> None:
        self.settings = settings
        self.db = db
        self.worker_id = worker_id or default_worker_id()
        self.models = ModelRegistry(settings)
        self._running: set[asyncio.Task[None]] = set()
        # The runs of this worker by execution id: a cancel on the bus stops exactly that one.
        self._runs: dict[str, asyncio.Task[None]] = {}
        self._kick = asyncio.Event()
        # Executions wake-ups named as runnable, claimed by id. A search for the oldest runnable one is due
        # at start, when the beat's look finds one and when the named ones overflow; a claim that finds nothing
        # ends it. A claim is a write transaction: none is spent on finding nothing after every run.
        self._named: dict[str, None] = {}
        self._stopping = False
        # What the wake-up of a decision said of its run (`core.run_entry.Resume`), where its first step may take
        # the claim over: by execution id, for as long as it is named.
        self._resumes: dict[str, Resume] = {}
        self._search = True

    async def run(self, stop: asyncio.Event) -> None:
        """Work until `stop` is set, then cancel what runs: its leases lapse and others resume it."""
        # Replies to review mail (VOUCH_INBOUND_SMTP): bound first, so a bad address fails the start loudly. A
        # port already taken (another worker on this host has it) leaves this one without the listener, said
        # once in the log: any one listener decides for every worker.
        inbound = InboundListener(self.settings, self.db) if self.settings.inbound_smtp else None
        if inbound is not None and not await inbound.start():
            inbound = None
        wakeups = self.db.bus.listen(
            (WAKE_CHANNEL,),
            self._woken,
            self._missed,
            name="the worker's wake-ups",
            meanwhile="the beat's look stands in",
        )
        looks = Looks(self.db, self.settings.worker_poll_seconds)
        looks.add("claims", SEARCHABLE, self._missed)
        helpers = [asyncio.create_task(run_review_timers(self.db, self.settings, looks, stop))]
        # External agents that went silent (agentModel "external"): any one worker's look is enough.
        helpers.append(asyncio.create_task(run_external_sweep(self.db, self.settings, stop)))
        # Webhook deliveries (core/webhook_sender.py): always on, the outbox may hold rows from any process.
        helpers.append(asyncio.create_task(run_webhook_dispatcher(self.db, self.settings, looks, stop)))
        if self.settings.otel_traces_endpoint:
            # Spans over OTLP (issue 23.6); without the setting the SDK is not even imported.
            from core.trace_export import run_trace_exporter

            helpers.append(asyncio.create_task(run_trace_exporter(self.db, self.settings, looks, stop)))
        # Verdicts of ended runs with scorers (issue 23): any worker scores any run, once.
        helpers.append(asyncio.create_task(run_scoring(self.db, self.settings, self.models, looks, stop)))
        # Suites' pending runs (issue 23): started as slots of their key free up.
        helpers.append(asyncio.create_task(run_suite_scheduler(self.db, self.settings, looks, stop)))
        if self.settings.smtp_url:
            helpers.append(asyncio.create_task(run_mail_dispatcher(self.db, self.settings.smtp_url, looks, stop)))
        helpers.append(asyncio.create_task(looks.run(stop)))
        stopper = asyncio.create_task(stop.wait())
        stopper.add_done_callback(lambda _: self._kick.set())
        log.info("worker %s started", self.worker_id)
        try:
            while not stop.is_set():
                self._kick.clear()
                await self._fill()
                await self._kick.wait()  # a wake-up, a run's end, the beat's look or the stop
        finally:
            self._stopping = True  # a wake-up heard from now on starts nothing
            for task in (*self._running, stopper):
                task.cancel()  # a run stops its agent between statements (ExecutionRunner.run)
            for task in helpers:
                self.db.stop(task)
            waited = (*self._running, *helpers, stopper)
            slow = asyncio.get_running_loop().call_later(STOP_WARNING_SECONDS, _say_what_waits, waited)
            try:
                await asyncio.gather(*waited, return_exceptions=True)
            finally:
                slow.cancel()
            await wakeups.stop()
            if inbound is not None:
                await inbound.stop()
            await self.models.aclose()
            log.info("worker %s stopped", self.worker_id)

    def _wanted(self, execution_id: str) -> None:
        self._named[execution_id] = None
        if len(self._named) > _NAMED_AT_MOST:
            # Far more named than can run: one search at a time finds them all, oldest first.
            self._named.clear()
            self._resumes.clear()
            self._search = True
        self._kick.set()

    async def _fill(self) -> None:
        lease = self.settings.worker_lease_seconds
        while len(self._running) < self.settings.worker_concurrency and (self._named or self._search):
            named = next(iter(self._named), None)
            try:
                if named is not None:
                    del self._named[named]
                    resume = self._resumes.pop(named, None)
                    taken = None if resume is None else claim_to_take_over(named, resume)
                    claim: Claim | None = taken or await claim_execution(self.db, self.worker_id, lease, named)
                else:
                    claim = await claim_next(self.db, self.worker_id, lease)
                    self._search = claim is not None
            except Exception:
                log.exception("claiming failed; retrying at the next wake-up")
                self._search = True
                return
            if claim is not None:
                self._start(claim)

    def _start(self, claim: Claim) -> None:
        runner = ExecutionRunner(self.settings, self.db, self.worker_id, claim, self.models)
        task = asyncio.create_task(runner.run())
        self._running.add(task)
        self._runs[claim.execution_id] = task
        task.add_done_callback(functools.partial(self._finished, claim.execution_id))

    def _finished(self, execution_id: str, task: asyncio.Task[None]) -> None:
        self._running.discard(task)
        if self._runs.get(execution_id) is task:
            del self._runs[execution_id]
        if self._named or self._search:  # waiting for room
            self._kick.set()

    def _woken(self, channel: str, message: dict[str, Any]) -> None:
        """A wake-up, heard as it is published (in this process) or as it arrives from Redis: a listener
        rather than a task reading a queue, so the claim starts one hop after the commit that asked for it."""
        if channel != WAKE_CHANNEL:
            return
        execution_id = str(message.get("executionId") or "")
        if message.get("cancelled"):
            # The cancel is committed; the run stops now rather than at its next step.
            run = self._runs.get(execution_id)
            if run is not None:
                run.cancel()
        elif not execution_id:
            self._missed()
        elif execution_id not in self._runs:  # heard twice (here and back from Redis): claimed once
            resume = Resume.from_json(execution_id, message.get("resume"))
            taken = None if resume is None else claim_to_take_over(execution_id, resume)
            if taken is not None and not self._stopping and len(self._running) < self.settings.worker_concurrency:
                # Started from here: its first step claims the run itself, with nothing to wait for before it.
                self._start(taken)
                return
            if resume is not None:
                self._resumes[execution_id] = resume
            self._wanted(execution_id)

    def _missed(self) -> None:
        """Wake-ups may have been lost (the bus reconnected, a wake-up named nothing, the beat's look found a runnable
        execution): search for runnable executions instead."""
        self._search = True
        self._kick.set()


def _say_what_waits(tasks: Iterable[asyncio.Task[Any]]) -> None:
    """A stop that hangs is a bug; the operator who must kill the process sees where each unfinished task is."""
    for task in tasks:
        if not task.done():
            where = io.StringIO()
            task.print_stack(limit=12, file=where)
            log.warning("stopping for %g s, still waiting for %s", STOP_WARNING_SECONDS, where.getvalue().rstrip())
