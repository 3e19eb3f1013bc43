"""Operations: `/metrics` (Prometheus text format), `/readyz`, and the per-request hooks behind them.

Where each number comes from:

- HTTP requests and latency: counters of *this* process (Prometheus sums them over the processes it scrapes).
  The route label is the URL rule (`/api/eval/status/<execution_id>`), never the raw path, so ids do not
  become label values; a path that matches no route counts as `unmatched`.
- Socket.IO connections: the Engine.IO sockets open in this process.
- Everything about executions, reviews, webhooks and mail: read from the database at scrape time (one query
  each), so every web process reports the same values and none is lost to a restart. The review wait
  histogram pairs each decided attempt with its pause event; its cost grows with the number of decisions.

Access: when `VOUCH_METRICS_TOKEN` is set, /metrics wants `Authorization: Bearer <token>`; unset, it is
open, like most exporters, and should be kept off the public network. It shows counts only, never a user's
data. /healthz (in api/app.py) and /readyz are always open: load balancers call them.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import logging
import time
from collections.abc import Iterable, Iterator
from datetime import datetime
from typing import Any

import redis.asyncio as aioredis
import sqlalchemy as sa
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector
from quart import Blueprint, Quart, Response, current_app, g, request

from agents.claims import runnable
from core.db import Database
from core.logs import current_execution_id
from core.models import Decision, Event, Execution, MailMessage, WebhookAttempt, WebhookDelivery, utcnow
from core.settings import Settings
from core.vocabulary import EXECUTION_STATUSES, EventType

log = logging.getLogger(__name__)
access_log = logging.getLogger("vouch.http")

blueprint = Blueprint("operations", __name__)

REVIEW_WAIT_BUCKETS = (60.0, 300.0, 900.0, 3600.0, 4 * 3600.0, 24 * 3600.0, 3 * 24 * 3600.0)
READY_TIMEOUT = 3.0
SCRAPE_TIMEOUT = 10.0


def _seconds(start: datetime, end: datetime) -> float:
    return max(0.0, (end - start).total_seconds())


class DatabaseSnapshot(Collector):
    """The database-derived metrics of one scrape; `refresh` (async) reads them, `collect` (sync) yields them."""

    def __init__(self) -> None:
        self.families: list[Metric] = []

    def collect(self) -> Iterable[Metric]:
        return list(self.families)

    async def refresh(self, db: Database) -> None:
        try:
            async with asyncio.timeout(SCRAPE_TIMEOUT):
                async with db.reading() as session:
                    families = await _database_families(session)
            ok = 1.0
        except Exception:
            log.warning("metrics: reading the database failed", exc_info=True)
            families, ok = [], 0.0
        up = GaugeMetricFamily("vouch_database_scrape_ok", "1 when this scrape read the database, else 0.")
        up.add_metric([], ok)
        self.families = [*families, up]


async def _database_families(session: Any) -> list[Metric]:
    now = utcnow()
    counted = await session.execute(sa.select(Execution.status, sa.func.count()).group_by(Execution.status))
    by_status = dict(counted.all())
    executions = GaugeMetricFamily("vouch_executions", "Executions by status.", labels=["status"])
    for status in sorted(set(EXECUTION_STATUSES) | set(by_status)):
        executions.add_metric([status], float(by_status.get(status, 0)))
    # What a worker's claim takes (a run kept for its wake-up included): the rule of agents/claims.py itself.
    queued = await session.scalar(
        sa.select(sa.func.count()).select_from(Execution).where(*runnable(named=True)), {"now": now}
    )
    queue = GaugeMetricFamily("vouch_queue_depth", "Runnable executions no worker holds a lease on.")
    queue.add_metric([], float(queued or 0))

    waiting = GaugeMetricFamily("vouch_review_waiting", "Checkpoints waiting for a reviewer now.")
    waiting.add_metric([], float(by_status.get("awaiting_review", 0)))
    deliveries = GaugeMetricFamily("vouch_webhook_deliveries", "Webhook deliveries by status.", labels=["status"])
    rows = (
        await session.execute(sa.select(WebhookDelivery.status, sa.func.count()).group_by(WebhookDelivery.status))
    ).all()
    for status, count in sorted(rows):
        deliveries.add_metric([status], float(count))
    outcome = sa.case(
        (WebhookAttempt.status_code.between(200, 299), "success"),
        (WebhookAttempt.status_code.is_not(None), "http_error"),
        else_="network_error",
    )
    attempts = GaugeMetricFamily(
        "vouch_webhook_attempts",
        "Webhook HTTP attempts by outcome (success, http_error, network_error).",
        labels=["outcome"],
    )
    for name, count in sorted((await session.execute(sa.select(outcome, sa.func.count()).group_by(outcome))).all()):
        attempts.add_metric([name], float(count))
    mail = GaugeMetricFamily(
        "vouch_mail_messages", "Outgoing mail by status (queued, sent, failed, dev_mailbox).", labels=["status"]
    )
    rows = (await session.execute(sa.select(MailMessage.status, sa.func.count()).group_by(MailMessage.status))).all()
    for status in sorted({"queued", "sent", "failed"} | {status for status, _ in rows}):
        mail.add_metric([status], float(dict(rows).get(status, 0)))
    return [executions, queue, waiting, await _review_wait_histogram(session), deliveries, attempts, mail]


async def _review_wait_histogram(session: Any) -> Metric:
    """Decided review waits (automatic passes excluded), as core.metrics measures them: pause event → decision."""
    rows = await session.execute(
        sa.select(Decision.checkpoint_id, Decision.attempt, Decision.decided_at, Event.payload, Event.created_at)
        .join(
            Event,
            sa.and_(Event.execution_id == Decision.execution_id, Event.type == EventType.CHECKPOINT_AWAITING_REVIEW),
        )
        .where(Decision.via != "auto")
    )
    counts = [0] * (len(REVIEW_WAIT_BUCKETS) + 1)
    total = 0.0
    for checkpoint_id, attempt, decided_at, payload, paused_at in rows.all():
        if payload.get("checkpointId") != checkpoint_id or int(payload.get("attempt", 1)) != attempt:
            continue
        wait = _seconds(paused_at, decided_at)
        total += wait
        index = next((i for i, bound in enumerate(REVIEW_WAIT_BUCKETS) if wait <= bound), len(REVIEW_WAIT_BUCKETS))
        counts[index] += 1
    buckets: list[tuple[str, float]] = []
    running = 0
    for bound, count in zip((*REVIEW_WAIT_BUCKETS, float("inf")), counts, strict=True):
        running += count
        buckets.append(("+Inf" if bound == float("inf") else repr(bound), float(running)))
    histogram = HistogramMetricFamily("vouch_review_wait_seconds", "Decided review waits, pause to decision.")
    histogram.add_metric([], buckets, total)
    return histogram


class OpsMetrics:
    """One app's registry: nothing global, so several apps (tests) never clash."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.requests = Counter(
            "vouch_http_requests",
            "HTTP requests by route and status.",
            ["method", "route", "status"],
            registry=self.registry,
        )
        self.latency = Histogram(
            "vouch_http_request_duration_seconds",
            "HTTP request latency by route.",
            ["method", "route"],
            registry=self.registry,
        )
        self.sockets = Gauge(
            "vouch_socketio_connections", "Socket.IO connections open in this process.", registry=self.registry
        )
        self.sockets.set_function(self._count_sockets)
        self.database = DatabaseSnapshot()
        self.registry.register(self.database)
        self.socketio_server: Any = None

    def _count_sockets(self) -> float:
        eio = getattr(self.socketio_server, "eio", None)
        return float(len(getattr(eio, "sockets", {}) or {}))


def ops_metrics(app: Quart) -> OpsMetrics:
    found: OpsMetrics = app.extensions["vouch_ops"]
    return found


def install_operations(app: Quart) -> None:
    """The registry, the request hooks that count, time and log each request, and the routes."""
    app.extensions["vouch_ops"] = OpsMetrics()
    app.before_request(_started)
    app.after_request(_finished)
    app.teardown_request(_forget_execution)
    app.register_blueprint(blueprint)


async def _started() -> None:
    g.ops_started = time.perf_counter()
    execution_id = (request.view_args or {}).get("execution_id")
    if isinstance(execution_id, str):
        g.ops_execution_token = current_execution_id.set(execution_id[:64])


async def _finished(response: Response) -> Response:
    started = g.get("ops_started")
    if started is None:
        return response
    elapsed = time.perf_counter() - started
    route = request.url_rule.rule if request.url_rule is not None else "unmatched"
    metrics = ops_metrics(current_app)
    metrics.requests.labels(request.method, route, str(response.status_code)).inc()
    metrics.latency.labels(request.method, route).observe(elapsed)
    # The one access line of a request (the servers' own access logs are off): uvicorn's said who asked.
    client = request.remote_addr or "-"
    access_log.info(
        "%s %s %s %.1f ms from %s",
        request.method,
        route,
        response.status_code,
        elapsed * 1000,
        client,
        extra={"method": request.method, "route": route, "status": response.status_code},
    )
    return response


async def _forget_execution(_exc: BaseException | None) -> None:
    token = g.pop("ops_execution_token", None)
    if token is not None:
        current_execution_id.reset(token)


def _settings() -> Settings:
    found: Settings = current_app.extensions["vouch"].settings
    return found


def _authorised(settings: Settings) -> bool:
    if settings.metrics_token is None:
        return True
    sent = request.headers.get("Authorization", "")
    scheme, _, token = sent.partition(" ")
    return scheme.lower() == "bearer" and hmac.compare_digest(token.strip().encode(), settings.metrics_token.encode())


@blueprint.get("/metrics")
async def metrics() -> Response:
    if not _authorised(_settings()):
        return Response(
            "a bearer token is required\n",
            status=401,
            headers={"WWW-Authenticate": "Bearer"},
            content_type="text/plain; charset=utf-8",
        )
    found = ops_metrics(current_app)
    await found.database.refresh(current_app.extensions["vouch"].db)
    return Response(
        generate_latest(found.registry), content_type=CONTENT_TYPE_LATEST, headers={"Cache-Control": "no-store"}
    )


async def _check_database(db: Database) -> str:
    async with asyncio.timeout(READY_TIMEOUT):
        async with db.reading() as session:
            await session.execute(sa.text("SELECT 1"))
    return "ok"


async def _check_redis(url: str) -> str:
    client = aioredis.Redis.from_url(url, socket_connect_timeout=READY_TIMEOUT, socket_timeout=READY_TIMEOUT)
    try:
        async with asyncio.timeout(READY_TIMEOUT):
            await client.ping()
    finally:
        await client.aclose()
    return "ok"


def _checks(settings: Settings, db: Database) -> Iterator[tuple[str, Any]]:
    yield "database", _check_database(db)
    if settings.redis_url:
        yield "redis", _check_redis(settings.redis_url)


@blueprint.get("/readyz")
async def readyz() -> Response:
    """Ready when the database (and Redis, when configured) answer; 503 otherwise, naming what failed."""
    settings = _settings()
    results: dict[str, str] = {}
    names, checks = zip(*_checks(settings, current_app.extensions["vouch"].db), strict=True)
    for name, outcome in zip(names, await asyncio.gather(*checks, return_exceptions=True), strict=True):
        # The reason is for operators; it names the error's kind, not connection strings.
        results[name] = outcome if isinstance(outcome, str) else f"unavailable: {type(outcome).__name__}"
    ready = all(value == "ok" for value in results.values())
    body = {"status": "ready" if ready else "unavailable", "checks": results}
    return Response(
        json.dumps(body),
        status=200 if ready else 503,
        content_type="application/json",
        headers={"Cache-Control": "no-store"},
    )
