"""Exporting spans over OTLP/HTTP: run by the worker when OTEL_EXPORTER_OTLP_ENDPOINT is set.

The outbox rows (core/trace_outbox.py) are claimed with a lease, as webhook deliveries are, so any number of
workers export each unit once; the spans are built from the execution's events (core/trace_spans.py) and sent
through the SDK's OTLP exporter. It reads its other variables itself (OTEL_EXPORTER_OTLP_HEADERS,
OTEL_EXPORTER_OTLP_TIMEOUT, OTEL_EXPORTER_OTLP_COMPRESSION, OTEL_EXPORTER_OTLP_CERTIFICATE and their TRACES_
forms) and retries a transient failure within its timeout. A row is `sent` once the collector accepted it; a
refusal is tried again on SCHEDULE, then the row ends `failed`, in the log. A worker that dies between the
collector's answer and the row's update exports the unit again when its lease runs out, with the same trace and
span ids.
"""

from __future__ import annotations

import asyncio
import logging
from datetime import datetime, timedelta
from importlib.metadata import PackageNotFoundError, version
from typing import Any

import sqlalchemy as sa
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

from core.db import Database
from core.looks import NOW, Looks
from core.model_profiles import EXTERNAL, OFFLINE, PROVIDERS
from core.models import Event, Execution, TraceExport, utcnow
from core.outbox_claims import claim_next_due, due_rows
from core.settings import Settings
from core.trace_outbox import RUN_UNIT, TRACE_CHANNEL
from core.trace_spans import RunFacts, SpanBuilder, service_resource
from core.wakeups import Wakeups

log = logging.getLogger(__name__)

# Seconds to wait after the 1st, 2nd, … refused export: six attempts over about two and a half hours.
SCHEDULE = (5, 60, 300, 1800, 7200)
LEASE = timedelta(seconds=120)


def _version() -> str | None:
    try:
        return version("vouch")
    except PackageNotFoundError:
        return None


def provider_and_model(settings: Settings, agent_model: str) -> tuple[str | None, str | None]:
    """gen_ai.provider.name and gen_ai.request.model of an execution's agent model, where Vouch knows them."""
    if agent_model in (OFFLINE, EXTERNAL):
        return None, None
    profile = settings.model_profile(agent_model)
    if profile is not None:
        return profile.provider, profile.model
    provider, _, model = agent_model.partition(":")
    return (provider, model) if provider in PROVIDERS and model else (None, None)


async def claim_due(db: Database, now: datetime) -> TraceExport | None:
    async with db.transaction() as session:
        await db.backend.begin_writing(session)
        return await claim_next_due(session, db.backend, TraceExport, now, LEASE)


async def spans_of(db: Database, settings: Settings, builder: SpanBuilder, row: TraceExport) -> list[ReadableSpan]:
    """The unit's spans, from the execution's row and its events (none if the execution is gone)."""
    async with db.reading() as session:
        execution = await session.get(Execution, row.execution_id)
        if execution is None:
            return []
        events = list(
            await session.scalars(sa.select(Event).where(Event.execution_id == row.execution_id).order_by(Event.seq))
        )
    provider, model = provider_and_model(settings, execution.agent_model)
    error: dict[str, Any] = execution.error_info or {}
    facts = RunFacts(
        execution_id=execution.id,
        task_name=execution.task_name,
        agent_model=execution.agent_model,
        test_mode=execution.test_mode,
        status=execution.status,
        created_at=execution.created_at,
        error_code=str(error["code"]) if error.get("code") else None,
        error_detail=str(error.get("detail") or execution.error or "") or None,
        provider=provider,
        request_model=model,
    )
    if row.unit == RUN_UNIT:
        return builder.run_spans(facts, events)
    _, checkpoint_id, attempt = row.unit.split(":")
    return builder.review_spans(facts, events, checkpoint_id, int(attempt))


async def _record(db: Database, row: TraceExport, error: str | None) -> None:
    now = utcnow()
    if error is None:
        status, next_at = "sent", None
    elif row.attempts > len(SCHEDULE):
        status, next_at = "failed", None
        log.warning("trace export %s of %s: given up after %d attempts: %s", row.unit, row.execution_id,
                    row.attempts, error)
    else:
        status, next_at = "pending", now + timedelta(seconds=SCHEDULE[row.attempts - 1])
        log.warning("trace export %s of %s, attempt %d: %s", row.unit, row.execution_id, row.attempts, error)
    async with db.transaction() as session:
        # Only while the claim is still ours: a worker whose lease ran out must not overwrite its successor.
        await session.execute(
            sa.update(TraceExport)
            .where(TraceExport.id == row.id, TraceExport.attempts == row.attempts)
            .values(status=status, locked_until=None, next_attempt_at=next_at, last_error=error,
                    finished_at=None if status == "pending" else now),
            execution_options={"synchronize_session": False},
        )


async def export_due(db: Database, settings: Settings, builder: SpanBuilder, exporter: SpanExporter) -> int:
    """Export every unit that is due, one at a time; returns how many were tried."""
    tried = 0
    while (row := await claim_due(db, utcnow())) is not None:
        tried += 1
        try:
            spans = await spans_of(db, settings, builder, row)
            # The SDK's exporter blocks (requests, with its own retries): off the event loop.
            result = await asyncio.to_thread(exporter.export, spans) if spans else SpanExportResult.SUCCESS
            error = None if result is SpanExportResult.SUCCESS else "the collector did not accept the spans"
        except Exception as exc:
            log.exception("trace export %s of %s failed", row.unit, row.execution_id)
            error = f"{type(exc).__name__}: {exc}"[:1000]
        await _record(db, row, error)
    return tried


async def run_trace_exporter(db: Database, settings: Settings, looks: Looks, stop: asyncio.Event,
                             exporter: SpanExporter | None = None) -> None:
    """Export units until `stop` is set: woken over the bus after each commit that queues one, with the beat's look
    (core/looks.py) as the safety net (and for retries)."""
    exporter = exporter or OTLPSpanExporter(endpoint=settings.otel_traces_endpoint)
    builder = SpanBuilder(service_resource(), _version())
    wakeups = Wakeups(db.bus, (TRACE_CHANNEL,), "the trace exporter")
    looks.add("trace_export", due_rows(TraceExport, NOW), wakeups.wake)
    try:
        while not stop.is_set():
            try:
                await export_due(db, settings, builder, exporter)
            except Exception:
                log.exception("trace export round failed")
            await wakeups.wait()
    finally:
        await wakeups.stop()
        exporter.shutdown()
