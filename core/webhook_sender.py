"""Sending webhook deliveries: run by the worker beside the mail dispatcher.

Due rows are claimed with a lease (`locked_until`), so any number of workers never send one attempt
twice; a worker that dies mid-attempt leaves a lease that runs out, and the attempt is made again.
Each attempt is a WebhookAttempt row. A 2xx ends the delivery `succeeded`; 410 Gone ends it `failed`
(the receiver says: stop); anything else, a timeout or a network error is retried on SCHEDULE (with
jitter), or after the receiver's `Retry-After` when it sends one. A target the outbound guard refuses
ends the delivery `failed` at once: the refusal is the operator's policy and would repeat on every retry;
once the operator allow-lists the network, a redelivery sends it. An attempt that cannot even be made (a URL
stored before it was validated as it is now) is a failed attempt like a network error: on record, retried on
SCHEDULE, then given up.
"""

from __future__ import annotations

import asyncio
import json
import logging
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from email.utils import parsedate_to_datetime
from typing import Any
from urllib.parse import urlsplit

import httpx
import sqlalchemy as sa

from core.db import Database
from core.looks import NOW, Looks
from core.models import WebhookAttempt, WebhookDelivery, utcnow
from core.outbound import OutboundRefused, guarded_client, webhook_policy
from core.outbox_claims import claim_next_due, due_rows
from core.settings import Settings
from core.wakeups import Wakeups
from core.webhook_secrets import sign, signing_secrets
from core.webhooks import WEBHOOK_CHANNEL, invalidate_status_after_commit

log = logging.getLogger(__name__)

Clock = Callable[[], datetime]
Jitter = Callable[[], float]
# Seconds to wait after the 1st, 2nd, … failed attempt: ten attempts over about three days.
SCHEDULE = (5, 300, 1800, 7200, 18000, 36000, 50400, 72000, 86400)
MAX_ATTEMPTS = len(SCHEDULE) + 1
RETRY_AFTER_CAP = 86400.0
EXCERPT_BYTES = 1024
BATCH = 8


@dataclass(frozen=True)
class Outcome:
    status_code: int | None
    latency_ms: int
    excerpt: str | None
    error: str | None
    retry_after: float | None = None
    refused: bool = False

    @property
    def succeeded(self) -> bool:
        return self.status_code is not None and 200 <= self.status_code < 300


def render_body(payload: dict[str, Any], base_url: str | None) -> bytes:
    """The JSON body; the stored `statusUrl` path becomes absolute when the base URL is configured."""
    data = payload.get("data")
    if base_url and isinstance(data, dict) and str(data.get("statusUrl", "")).startswith("/"):
        payload = {**payload, "data": {**data, "statusUrl": base_url + data["statusUrl"]}}
    return json.dumps(payload, separators=(",", ":"), ensure_ascii=False).encode()


def parse_retry_after(value: str | None, now: datetime | None = None) -> float | None:
    """Seconds from `Retry-After` (delta-seconds or an HTTP date), capped at RETRY_AFTER_CAP; None if absent
    or unreadable."""
    if not value:
        return None
    value = value.strip()
    if value.isdigit():
        seconds = float(value)
    else:
        try:
            moment = parsedate_to_datetime(value)
        except (TypeError, ValueError):
            return None
        if moment.tzinfo is None:
            moment = moment.replace(tzinfo=UTC)
        seconds = (moment - (now or datetime.now(UTC))).total_seconds()
    return min(max(seconds, 1.0), RETRY_AFTER_CAP)


def next_delay(attempt: int, retry_after: float | None, jitter: Jitter) -> float | None:
    """Seconds until the next attempt after failed attempt number `attempt`; None: give up."""
    if attempt >= MAX_ATTEMPTS:
        return None
    if retry_after is not None:
        return retry_after
    # ±10 %: deliveries that failed together (a receiver outage) do not all come back at the same instant.
    return SCHEDULE[attempt - 1] * (0.9 + 0.2 * jitter())


async def claim_due(db: Database, clock: Clock, lease: timedelta) -> WebhookDelivery | None:
    async with db.transaction() as session:
        # Beginning may have waited for another writer: read the clock once it has.
        await db.backend.begin_writing(session)
        now = clock()
        return await claim_next_due(session, db.backend, WebhookDelivery, now, lease)


async def _excerpt(response: httpx.Response) -> str:
    taken = bytearray()
    async for chunk in response.aiter_bytes():
        taken += chunk
        if len(taken) >= EXCERPT_BYTES:
            break
    # PostgreSQL text cannot hold NUL; the log is for people, so a replacement character is fine.
    return bytes(taken[:EXCERPT_BYTES]).decode("utf-8", errors="replace").replace("\x00", "\ufffd")


async def attempt_once(
    settings: Settings, client: httpx.AsyncClient, delivery: WebhookDelivery, secrets: tuple[str, ...]
) -> Outcome:
    body = render_body(delivery.payload, settings.base_url)
    # Wall time, not the injected clock: receivers compare it with their own clock (replay protection).
    timestamp = int(time.time())
    headers = {
        "content-type": "application/json",
        "user-agent": "Vouch-Webhooks/1",
        "webhook-id": delivery.id,
        "webhook-timestamp": str(timestamp),
        "webhook-signature": sign(secrets, delivery.id, timestamp, body),
    }
    started = time.monotonic()

    def elapsed() -> int:
        return round((time.monotonic() - started) * 1000)

    try:
        # The client's timeout bounds each read; this bounds the whole attempt (a slow trickle too).
        async with asyncio.timeout(settings.webhook_timeout_seconds):
            async with client.stream("POST", delivery.url, content=body, headers=headers) as response:
                excerpt = await _excerpt(response)
    except OutboundRefused as exc:
        return Outcome(None, elapsed(), None, str(exc), refused=True)
    except TimeoutError:
        return Outcome(None, elapsed(), None, f"no answer within {settings.webhook_timeout_seconds:g} s")
    except httpx.TimeoutException as exc:
        return Outcome(None, elapsed(), None, f"timed out: {type(exc).__name__}")
    except httpx.HTTPError as exc:
        return Outcome(None, elapsed(), None, f"{type(exc).__name__}: {exc}"[:1000])
    except httpx.InvalidURL as exc:
        # A row stored before webhookUrl was validated as it is now: recorded and retried on the schedule
        # like any failed attempt (a PATCH of the URL does not reach rows already queued).
        return Outcome(None, elapsed(), None, f"the URL cannot be used: {exc}"[:1000])
    except Exception as exc:
        # Whatever else stops this one attempt is its failure, on record; never a silent loop of leases.
        log.exception("webhook %s: the attempt could not be made", delivery.id)
        return Outcome(None, elapsed(), None, f"the request could not be made: {type(exc).__name__}: {exc}"[:1000])
    retry_after = parse_retry_after(response.headers.get("retry-after"))
    error = None if 200 <= response.status_code < 300 else f"HTTP {response.status_code}"
    return Outcome(response.status_code, elapsed(), excerpt, error, retry_after)


async def _record(db: Database, delivery: WebhookDelivery, started: datetime, outcome: Outcome, clock: Clock,
                  jitter: Jitter) -> None:
    number = delivery.attempts
    now = clock()
    delay = None
    if outcome.succeeded:
        status = "succeeded"
    elif outcome.refused or outcome.status_code == 410:
        status = "failed"
    else:
        delay = next_delay(number, outcome.retry_after, jitter)
        status = "failed" if delay is None else "pending"
    host = urlsplit(delivery.url).hostname
    if status != "succeeded":
        log.warning("webhook %s to %s, attempt %d: %s (%s)", delivery.id, host, number, outcome.error, status)
    async with db.transaction() as session:
        session.add(
            WebhookAttempt(
                delivery_id=delivery.id,
                number=number,
                started_at=started,
                status_code=outcome.status_code,
                latency_ms=outcome.latency_ms,
                response_excerpt=outcome.excerpt,
                error=outcome.error,
            )
        )
        # Only while the claim is still ours (attempts unchanged): a worker whose lease ran out must not
        # overwrite the result of the attempt that replaced it.
        await session.execute(
            sa.update(WebhookDelivery)
            .where(WebhookDelivery.id == delivery.id, WebhookDelivery.attempts == number)
            .values(
                status=status,
                locked_until=None,
                next_attempt_at=None if delay is None else now + timedelta(seconds=delay),
                finished_at=None if status == "pending" else now,
            ),
            execution_options={"synchronize_session": False},
        )
        # The attempt shows in the status record's `webhook` part and appends no event: say so after commit.
        invalidate_status_after_commit(session, delivery.execution_id)


async def _send(db: Database, settings: Settings, client: httpx.AsyncClient, delivery: WebhookDelivery,
                clock: Clock, jitter: Jitter) -> None:
    started = clock()
    async with db.reading() as session:
        secrets = await signing_secrets(session, settings.secret_key, delivery.user_id, started)
    outcome = await attempt_once(settings, client, delivery, secrets.signing)
    await _record(db, delivery, started, outcome, clock, jitter)


async def deliver_due_webhooks(
    db: Database,
    settings: Settings,
    *,
    client: httpx.AsyncClient | None = None,
    clock: Clock = utcnow,
    jitter: Jitter = random.random,
) -> int:
    """Make every attempt that is due (BATCH at a time); returns how many were made."""
    lease = timedelta(seconds=settings.webhook_timeout_seconds + 60)
    own = client is None
    client = client or guarded_client(webhook_policy(settings), timeout=settings.webhook_timeout_seconds)
    made = 0
    try:
        while True:
            batch: list[WebhookDelivery] = []
            while len(batch) < BATCH and (delivery := await claim_due(db, clock, lease)) is not None:
                batch.append(delivery)
            if not batch:
                return made
            results = await asyncio.gather(
                *(_send(db, settings, client, d, clock, jitter) for d in batch), return_exceptions=True
            )
            for delivery, result in zip(batch, results, strict=True):
                if isinstance(result, BaseException):
                    # The lease runs out and the attempt is made again: nothing is lost.
                    log.error("webhook %s: attempt failed unrecorded", delivery.id, exc_info=result)
            made += len(batch)
    finally:
        if own:
            await client.aclose()


async def seconds_until_next_due(db: Database, clock: Clock) -> float | None:
    async with db.reading() as session:
        due = await session.scalar(
            sa.select(sa.func.min(sa.func.coalesce(WebhookDelivery.locked_until, WebhookDelivery.next_attempt_at)))
            .where(WebhookDelivery.status == "pending")
        )
    if due is None:
        return None
    if due.tzinfo is None:  # an aggregate's result skips the column type's conversion on SQLite
        due = due.replace(tzinfo=UTC)
    return max(0.0, (due - clock()).total_seconds())


async def run_webhook_dispatcher(
    db: Database,
    settings: Settings,
    looks: Looks,
    stop: asyncio.Event,
    *,
    clock: Clock = utcnow,
    jitter: Jitter = random.random,
) -> None:
    """Send deliveries until `stop` is set: woken over the bus after each commit that queues one, and at
    the next due retry, with the beat's look (core/looks.py) as the safety net."""
    wakeups = Wakeups(db.bus, (WEBHOOK_CHANNEL,), "the webhook sender")
    looks.add("webhooks", due_rows(WebhookDelivery, NOW), wakeups.wake)
    try:
        async with guarded_client(webhook_policy(settings), timeout=settings.webhook_timeout_seconds) as client:
            while not stop.is_set():
                due: float | None = None
                try:
                    await deliver_due_webhooks(db, settings, client=client, clock=clock, jitter=jitter)
                    due = await seconds_until_next_due(db, clock)
                except Exception:
                    log.exception("webhook dispatch round failed")
                await wakeups.wait(None if due is None else max(0.05, due))
    finally:
        await wakeups.stop()
