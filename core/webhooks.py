"""Webhooks: what is sent, when it is queued, the delivery log and redelivery.

A delivery is an outbox row (WebhookDelivery) written in the transaction that appends the event it
reports: `core.events.append_event` calls `enqueue_for_event` for the few event types that can become
webhooks, so the final state and its notification commit together or not at all. The worker sends the
rows (core/webhook_sender.py).

Body (Standard Webhooks): `{"type", "timestamp", "data"}`. The completion notification is always of type
`execution.completed`, whatever the final status (completed, failed, rejected, cancelled): it tells that
the execution has finished, and `data.status` tells how. A task can also ask (`webhookEvents`) for
`checkpoint.awaiting_review` and `checkpoint.decided`.

A run with scorers (issue 23) holds its completion notification back until its verdict is recorded: its final
event wakes the scoring workers (SCORING_CHANNEL) instead, and the `execution.scored` event queues the
notification, with `data.verdict`.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncSession

from core.bus import CACHE_CHANNEL, SUITE_CHANNEL
from core.db import Alone, publish_after_commit
from core.errors import error_object
from core.event_messages import AddedEvent
from core.formatting import isoformat
from core.ids import new_id
from core.metrics import execution_metrics
from core.models import EXECUTIONS, Execution, WebhookAttempt, WebhookDelivery, utcnow
from core.scorers import verdict_json
from core.vocabulary import ENDING_EVENTS, FINAL, EventType, VerdictState

WEBHOOK_CHANNEL = "vouch:webhooks"
# A run with scorers has ended: the workers' scoring loops (agents/scoring.py) look for work.
SCORING_CHANNEL = "vouch:scoring"
COMPLETION = EventType.EXECUTION_COMPLETED
OPTIONAL_EVENTS = (EventType.CHECKPOINT_AWAITING_REVIEW, EventType.CHECKPOINT_DECIDED)
FINAL_EVENTS = ENDING_EVENTS
# The event types append_event hands over; anything else costs the hot path one set lookup only.
WEBHOOK_EVENT_TYPES = FINAL_EVENTS | frozenset(OPTIONAL_EVENTS) | {EventType.EXECUTION_SCORED}
# Fields of a checkpoint event's payload that go out; the rest (the agent's next action) stays private.
_CHECKPOINT_FIELDS = (
    "checkpointId",
    "position",
    "stage",
    "verificationQuestion",
    "attempt",
    "decision",
    "by",
    "via",
    "comment",
    "at",
)
STATUS_PATH = "/api/eval/status/{execution_id}"


class RedeliveryRefused(Exception):
    """A redelivery is impossible; `code` says why in a stable word."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


async def _metrics(session: AsyncSession, execution_id: str) -> dict[str, Any]:
    # populate_existing: the caller's session may hold this Execution from before a core UPDATE made it final.
    execution = await session.get(Execution, execution_id, populate_existing=True)
    return await execution_metrics(session, execution) if execution is not None else {}


def _completion_payload(row: sa.Row[Any], metrics: dict[str, Any]) -> dict[str, Any]:
    result = row.result if isinstance(row.result, dict) else {}
    return {
        "type": COMPLETION,
        "timestamp": isoformat(row.completed_at or utcnow()),
        "data": {
            "executionId": row.id,
            "taskName": row.task_name,
            "status": row.status,
            "completedAt": isoformat(row.completed_at),
            "summary": result.get("summary"),
            "output": result.get("output"),
            "error": error_object(row.error_info, row.error),
            "metrics": metrics,
            "verdict": verdict_json(row.verdict_state, row.verdict_passed, row.verdict_score, row.verdict_scores),
            # A path here; the sender prefixes VOUCH_BASE_URL (the worker knows it, this transaction need not).
            "statusUrl": STATUS_PATH.format(execution_id=row.id),
        },
    }


def _checkpoint_payload(row: sa.Row[Any], event: AddedEvent) -> dict[str, Any]:
    data: dict[str, Any] = {"executionId": row.id, "taskName": row.task_name}
    data.update({key: event.payload[key] for key in _CHECKPOINT_FIELDS if key in event.payload})
    data["statusUrl"] = STATUS_PATH.format(execution_id=row.id)
    return {"type": event.type, "timestamp": isoformat(event.created_at), "data": data}


_FACTS = (
    Execution.id,
    Execution.user_id,
    Execution.task_name,
    Execution.status,
    Execution.completed_at,
    Execution.result,
    Execution.error,
    Execution.error_info,
    Execution.webhook_url,
    Execution.webhook_events,
    Execution.verdict_state,
    Execution.verdict_passed,
    Execution.verdict_score,
    Execution.verdict_scores,
    Execution.suite_id,
)


# Built once, on the table (every decision and every finish asks): no ORM statement building per event.
_FACTS_OF = sa.select(*(EXECUTIONS.c[column.key] for column in _FACTS)).where(
    EXECUTIONS.c.id == sa.bindparam("execution_id")
)


async def _facts(session: AsyncSession, execution_id: str) -> sa.Row[Any] | None:
    # Columns, not the ORM object: the session may hold a stale Execution whose status a core UPDATE
    # just changed in this same transaction.
    return (await session.execute(_FACTS_OF, {"execution_id": execution_id})).first()


def _queue(session: AsyncSession, row: sa.Row[Any], url: str, payload: dict[str, Any]) -> WebhookDelivery:
    now = utcnow()
    delivery = WebhookDelivery(
        id=new_id("msg"),
        execution_id=row.id,
        user_id=row.user_id,
        event_type=payload["type"],
        url=url,
        payload=payload,
        status="pending",
        attempts=0,
        next_attempt_at=now,
        created_at=now,
    )
    session.add(delivery)
    publish_after_commit(session, WEBHOOK_CHANNEL, {"id": delivery.id})
    return delivery


_AWAITED_VERDICT = (VerdictState.PENDING, VerdictState.GRADING)


class WebhookHint(NamedTuple):
    """The execution's webhook URL and verdict state as the statement that added the event returned them."""

    webhook_url: str | None
    verdict_state: str | None
    suite_id: str | None


def quiet(hint: WebhookHint) -> bool:
    """Whether the execution, as `hint` has it, has no webhook and no verdict to wait for: its events call for
    nothing to be written with them, only its suite's wake-up when one ends the run (`suite_slot_freed`)."""
    return not hint.webhook_url and hint.verdict_state not in _AWAITED_VERDICT


def suite_slot_freed(session: AsyncSession | Alone, event_type: str, suite_id: str | None) -> None:
    """After an event that ends a suite's run, its scheduler's wake-up."""
    if event_type in FINAL_EVENTS and suite_id is not None:
        # A slot of the key is free: its suites' pending runs may start (agents/suite_scheduler.py).
        publish_after_commit(session, SUITE_CHANNEL, {"suiteId": suite_id})


# `quiet`, as a condition on the execution's row.
QUIET = sa.and_(
    sa.func.coalesce(EXECUTIONS.c.webhook_url, "") == "",
    # Spelled out, not NOT IN: an IN list is a bind parameter expanded as the statement runs, which a statement
    # compiled once (`DirectStatement`) cannot take.
    *(sa.func.coalesce(EXECUTIONS.c.verdict_state, "") != state.value for state in _AWAITED_VERDICT),
)


async def enqueue_for_event(
    session: AsyncSession, event: AddedEvent, hint: WebhookHint | None = None
) -> WebhookDelivery | None:
    """Queue the webhook an event calls for, if any, in the caller's transaction. With `hint` (read in this
    transaction by the statement that added the event), an execution with no webhook and no verdict to wait for
    costs no read (issue 25: every decision and every finish asks)."""
    if event.type not in WEBHOOK_EVENT_TYPES:
        return None
    if hint is not None and quiet(hint):
        suite_slot_freed(session, event.type, hint.suite_id)
        return None
    row = await _facts(session, event.execution_id)
    if row is None:
        return None
    waits_for_verdict = row.verdict_state in _AWAITED_VERDICT
    if event.type in FINAL_EVENTS and waits_for_verdict:
        publish_after_commit(session, SCORING_CHANNEL, {"executionId": row.id})
    suite_slot_freed(session, event.type, row.suite_id)
    if not row.webhook_url:
        return None
    if event.type == EventType.EXECUTION_SCORED or (event.type in FINAL_EVENTS and not waits_for_verdict):
        metrics = await _metrics(session, row.id)
        return _queue(session, row, row.webhook_url, _completion_payload(row, metrics))
    if event.type in (row.webhook_events or ()):
        return _queue(session, row, row.webhook_url, _checkpoint_payload(row, event))
    return None


async def redeliver(session: AsyncSession, execution: Execution) -> WebhookDelivery:
    """Queue the completion notification again, as a new message (a new `webhook-id`).

    Raises RedeliveryRefused (`webhook_not_configured`, `execution_not_finished`) when there is nothing to send.
    """
    row = await _facts(session, execution.id)
    if row is None:
        raise RedeliveryRefused("not_found", f"no execution {execution.id}")
    if not row.webhook_url:
        raise RedeliveryRefused("webhook_not_configured", "the execution has no webhookUrl to deliver to")
    if row.status not in FINAL:
        raise RedeliveryRefused(
            "execution_not_finished", f"the execution is {row.status}; its completion is sent once it finishes"
        )
    if row.verdict_state in (VerdictState.PENDING, VerdictState.GRADING):
        raise RedeliveryRefused(
            "verdict_pending", "the run's verdict is not recorded yet; its completion is sent once it is"
        )
    metrics = await _metrics(session, row.id)
    delivery = _queue(session, row, row.webhook_url, _completion_payload(row, metrics))
    # The status record lists deliveries, and a redelivery appends no event: cached records must hear of it.
    invalidate_status_after_commit(session, row.id)
    return delivery


def invalidate_status_after_commit(session: AsyncSession, execution_id: str) -> None:
    """Once `session` commits, web processes drop their cached status record of the execution
    (api/status_cache.py): for changes the record shows that append no event."""
    publish_after_commit(session, CACHE_CHANNEL, {"executions": [execution_id]})


def attempt_record(attempt: WebhookAttempt) -> dict[str, Any]:
    return {
        "number": attempt.number,
        "at": isoformat(attempt.started_at),
        "statusCode": attempt.status_code,
        "latencyMs": attempt.latency_ms,
        "response": attempt.response_excerpt,
        "error": attempt.error,
    }


async def deliveries_of(session: AsyncSession, execution_id: str) -> list[tuple[WebhookDelivery, list[WebhookAttempt]]]:
    """An execution's deliveries, oldest first, each with its attempts in order: the delivery log."""
    deliveries = list(
        await session.scalars(
            sa.select(WebhookDelivery)
            .where(WebhookDelivery.execution_id == execution_id)
            .order_by(WebhookDelivery.created_at, WebhookDelivery.id)
        )
    )
    attempts: dict[str, list[WebhookAttempt]] = {d.id: [] for d in deliveries}
    if deliveries:
        for attempt in await session.scalars(
            sa.select(WebhookAttempt)
            .where(WebhookAttempt.delivery_id.in_(list(attempts)))
            .order_by(WebhookAttempt.delivery_id, WebhookAttempt.number)
        ):
            attempts[attempt.delivery_id].append(attempt)
    return [(d, attempts[d.id]) for d in deliveries]


async def webhook_record(session: AsyncSession, execution: Execution) -> dict[str, Any]:
    """The status record's `webhook` part: the URL and every delivery with its attempts."""
    if execution.webhook_url is None and not execution.webhook_events:
        # Never had a URL to send to (a cleared URL may have left checkpoint deliveries): nothing to read.
        return {"url": None, "deliveries": []}
    return {
        "url": execution.webhook_url,
        "deliveries": [
            {
                "webhookId": delivery.id,
                "type": delivery.event_type,
                "status": delivery.status,
                "createdAt": isoformat(delivery.created_at),
                "nextAttemptAt": isoformat(delivery.next_attempt_at) if delivery.status == "pending" else None,
                "finishedAt": isoformat(delivery.finished_at),
                "attempts": [attempt_record(attempt) for attempt in attempts],
            }
            for delivery, attempts in await deliveries_of(session, execution.id)
        ],
    }
