"""Webhooks end to end inside one process: the outbox row, the signed POST to a real receiver, retries on an
injected clock, 410, Retry-After, the outbound guard, rotation and redelivery."""

from __future__ import annotations

import asyncio
import base64
import json
from datetime import UTC, datetime, timedelta

import pytest
import sqlalchemy as sa

from core.allowlist import parse_allowlist
from core.db import Database
from core.events import append_any_event
from core.models import Execution, WebhookDelivery, utcnow
from core.settings import Settings
from core.webhook_secrets import derive_secret, rotate_secret, signing_secrets
from core.webhook_sender import MAX_ATTEMPTS, SCHEDULE, deliver_due_webhooks, next_delay, parse_retry_after
from core.webhooks import WEBHOOK_EVENT_TYPES, RedeliveryRefused, redeliver, webhook_record
from tests.conftest import Account, make_account
from tests.core.webhook_support import FakeClock, attempts, deliveries, finish, new_execution, secrets_of
from tests.support.webhook_receiver import Answer, webhook_receiver


@pytest.fixture
def hook_settings(settings: Settings) -> Settings:
    # The receivers listen on loopback: allow-listed, as an operator would for an internal receiver.
    return settings.with_changes(webhook_allowlist=parse_allowlist("127.0.0.1"), webhook_timeout_seconds=5.0)


@pytest.fixture
async def owner(db: Database, settings: Settings) -> Account:
    return await make_account(db, settings, "owner@example.com")


def clock_at_now() -> FakeClock:
    return FakeClock(utcnow())


def test_the_append_event_gate_and_the_webhook_types_agree() -> None:
    from core import events

    assert events.WEBHOOK_EVENT_TYPES is WEBHOOK_EVENT_TYPES


def test_secrets_are_derived_32_byte_whsec_values(settings: Settings) -> None:
    first = derive_secret(settings.secret_key, "usr_1", 1)
    assert first.startswith("whsec_") and len(base64.b64decode(first.removeprefix("whsec_"))) == 32
    assert derive_secret(settings.secret_key, "usr_1", 1) == first
    others = {derive_secret(settings.secret_key, "usr_1", 2), derive_secret(settings.secret_key, "usr_2", 1)}
    assert len({first, *others}) == 3
    assert derive_secret(b"another-server-key-0123456789abcdefgh", "usr_1", 1) != first


async def test_rotation_keeps_the_previous_secret_signing_for_24_hours(
    db: Database, settings: Settings, owner: Account
) -> None:
    key = settings.secret_key
    async with db.transaction() as session:
        before = await signing_secrets(session, key, owner.user_id)
        assert before.generation == 1 and before.signing == (before.current,)
        rotated = await rotate_secret(session, key, owner.user_id)
    assert rotated.generation == 2 and rotated.signing == (rotated.current, before.current)
    assert rotated.previous_retires_at is not None
    async with db.reading() as session:
        later = await signing_secrets(session, key, owner.user_id, utcnow() + timedelta(hours=25))
    assert later.signing == (rotated.current,)


async def test_the_final_state_and_its_delivery_commit_together(
    db: Database, hook_settings: Settings, owner: Account
) -> None:
    execution_id = await new_execution(db, owner, "http://127.0.0.1:9/hook")
    async with db.transaction() as session:  # events that are no webhook queue nothing
        await append_any_event(session, execution_id, "agent.message", {"text": "hi"})
        await append_any_event(session, execution_id, "checkpoint.awaiting_review", {"checkpointId": "chk_1"})
    assert await deliveries(db, execution_id) == []
    with pytest.raises(RuntimeError):
        async with db.transaction() as session:
            await append_any_event(session, execution_id, "execution.completed", {"status": "completed"})
            raise RuntimeError("the transaction fails after the event")
    assert await deliveries(db, execution_id) == []
    await finish(db, execution_id, result={"summary": "All done."})
    [delivery] = await deliveries(db, execution_id)
    assert (delivery.status, delivery.event_type, delivery.attempts) == ("pending", "execution.completed", 0)
    assert delivery.payload["type"] == "execution.completed"
    data = delivery.payload["data"]
    assert data["executionId"] == execution_id and data["status"] == "completed" and data["summary"] == "All done."
    assert data["statusUrl"] == f"/api/eval/status/{execution_id}" and isinstance(data["metrics"], dict)
    assert data["completedAt"] == delivery.payload["timestamp"]

    plain = await new_execution(db, owner, None)  # no webhookUrl: nothing to send
    await finish(db, plain, "failed", error="boom")
    assert await deliveries(db, plain) == []


async def test_optional_checkpoint_events_are_sent_only_when_asked_for(db: Database, owner: Account) -> None:
    execution_id = await new_execution(db, owner, "http://127.0.0.1:9/hook", events=["checkpoint.decided"])
    async with db.transaction() as session:
        await append_any_event(session, execution_id, "checkpoint.awaiting_review", {"checkpointId": "chk_1"})
        await append_any_event(
            session, execution_id, "checkpoint.decided",
            {"checkpointId": "chk_1", "decision": "approve", "by": "r@example.com", "via": "api", "attempt": 1},
        )  # fmt: skip
    [delivery] = await deliveries(db, execution_id)
    assert delivery.payload["type"] == "checkpoint.decided"
    assert delivery.payload["data"]["decision"] == "approve" and delivery.payload["data"]["checkpointId"] == "chk_1"


async def test_a_delivery_is_signed_and_verifies_with_standard_webhooks(
    db: Database, hook_settings: Settings, owner: Account
) -> None:
    settings = hook_settings.with_changes(base_url="https://vouch.example")
    async with webhook_receiver(await secrets_of(db, settings, owner.user_id)) as receiver:
        execution_id = await new_execution(db, owner, receiver.url)
        await finish(db, execution_id)
        assert await deliver_due_webhooks(db, settings) == 1
    [request] = receiver.received
    assert request.verified_with == [0]
    [delivery] = await deliveries(db, execution_id)
    assert request.webhook_id == delivery.id and delivery.status == "succeeded"
    body = json.loads(request.body)
    assert body["data"]["statusUrl"] == f"https://vouch.example/api/eval/status/{execution_id}"
    [attempt] = await attempts(db, delivery.id)
    assert (attempt.number, attempt.status_code, attempt.response_excerpt, attempt.error) == (1, 200, "ok", None)
    assert attempt.latency_ms is not None and attempt.latency_ms >= 0


async def test_500_twice_then_200_is_three_attempts_of_one_message(
    db: Database, hook_settings: Settings, owner: Account
) -> None:
    script = [Answer(500, body="down"), Answer(500, body="still down"), Answer(200)]
    async with webhook_receiver(await secrets_of(db, hook_settings, owner.user_id), script) as receiver:
        execution_id = await new_execution(db, owner, receiver.url)
        await finish(db, execution_id)
        clock = clock_at_now()
        for expected_wait in SCHEDULE[:2]:
            assert await deliver_due_webhooks(db, hook_settings, clock=clock, jitter=lambda: 0.5) == 1
            [delivery] = await deliveries(db, execution_id)
            assert delivery.status == "pending"
            assert delivery.next_attempt_at == clock.now + timedelta(seconds=expected_wait)
            assert await deliver_due_webhooks(db, hook_settings, clock=clock) == 0  # not due yet
            clock.advance(expected_wait)
        assert await deliver_due_webhooks(db, hook_settings, clock=clock) == 1
    assert len(receiver.received) == 3
    assert {r.webhook_id for r in receiver.received} == {delivery.id}
    assert all(r.verified_with == [0] for r in receiver.received)
    [delivery] = await deliveries(db, execution_id)
    assert delivery.status == "succeeded"
    log = await attempts(db, delivery.id)
    assert [(a.number, a.status_code, a.response_excerpt) for a in log] == [
        (1, 500, "down"), (2, 500, "still down"), (3, 200, "ok")
    ]
    assert log[0].error == "HTTP 500"


async def test_410_stops_and_every_other_failure_gives_up_after_the_last_retry(
    db: Database, hook_settings: Settings, owner: Account
) -> None:
    script = [Answer(410)] + [Answer(503)] * MAX_ATTEMPTS
    async with webhook_receiver([], script) as receiver:
        gone = await new_execution(db, owner, receiver.url)
        await finish(db, gone)
        clock = clock_at_now()
        assert await deliver_due_webhooks(db, hook_settings, clock=clock) == 1
        [delivery] = await deliveries(db, gone)
        assert delivery.status == "failed" and delivery.next_attempt_at is None
        clock.advance(86400)
        assert await deliver_due_webhooks(db, hook_settings, clock=clock) == 0

        failing = await new_execution(db, owner, receiver.url)
        await finish(db, failing)
        for _ in range(MAX_ATTEMPTS):
            assert await deliver_due_webhooks(db, hook_settings, clock=clock) == 1
            clock.advance(2 * 86400)
        assert await deliver_due_webhooks(db, hook_settings, clock=clock) == 0
    [delivery] = await deliveries(db, failing)
    assert (delivery.status, delivery.attempts) == ("failed", MAX_ATTEMPTS)
    assert len(receiver.received) == 1 + MAX_ATTEMPTS


async def test_retry_after_is_honoured(db: Database, hook_settings: Settings, owner: Account) -> None:
    script = [Answer(503, {"Retry-After": "120"}), Answer(200)]
    async with webhook_receiver([], script) as receiver:
        execution_id = await new_execution(db, owner, receiver.url)
        await finish(db, execution_id)
        clock = clock_at_now()
        await deliver_due_webhooks(db, hook_settings, clock=clock)
        [delivery] = await deliveries(db, execution_id)
        assert delivery.next_attempt_at == clock.now + timedelta(seconds=120)
        clock.advance(119)
        assert await deliver_due_webhooks(db, hook_settings, clock=clock) == 0
        clock.advance(1)
        assert await deliver_due_webhooks(db, hook_settings, clock=clock) == 1
    assert len(receiver.received) == 2


def test_retry_after_forms_and_the_schedule() -> None:
    now = datetime(2025, 1, 1, 12, 0, tzinfo=UTC)
    assert parse_retry_after("30", now) == 30
    assert parse_retry_after("Wed, 01 Jan 2025 12:05:00 GMT", now) == 300
    assert parse_retry_after("Wed, 01 Jan 2025 11:00:00 GMT", now) == 1  # in the past: soon, not at once
    assert parse_retry_after("999999999", now) == 86400  # capped
    assert parse_retry_after("soon", now) is None and parse_retry_after(None) is None
    assert next_delay(1, None, lambda: 0.0) == pytest.approx(4.5)
    assert next_delay(1, None, lambda: 1.0) == pytest.approx(5.5)
    assert next_delay(9, None, lambda: 0.5) == pytest.approx(86400)
    assert next_delay(MAX_ATTEMPTS, None, lambda: 0.5) is None
    assert sum(SCHEDULE) / 86400 == pytest.approx(3.15, abs=0.01)  # about three days


async def test_a_loopback_target_without_the_allow_list_is_refused_and_logged(
    db: Database, settings: Settings, owner: Account
) -> None:
    async with webhook_receiver([]) as receiver:
        execution_id = await new_execution(db, owner, receiver.url)
        await finish(db, execution_id)
        assert await deliver_due_webhooks(db, settings) == 1  # no allow-list in `settings`
    assert receiver.received == []
    [delivery] = await deliveries(db, execution_id)
    assert delivery.status == "failed"
    [attempt] = await attempts(db, delivery.id)
    assert attempt.status_code is None
    assert attempt.error is not None and "loopback" in attempt.error and "VOUCH_WEBHOOK_ALLOWLIST" in attempt.error


async def test_during_a_rotation_both_signatures_are_sent_and_verify(
    db: Database, hook_settings: Settings, owner: Account
) -> None:
    old = (await secrets_of(db, hook_settings, owner.user_id))[0]
    async with db.transaction() as session:
        new = (await rotate_secret(session, hook_settings.secret_key, owner.user_id)).current
    async with webhook_receiver([old, new]) as receiver:
        execution_id = await new_execution(db, owner, receiver.url)
        await finish(db, execution_id)
        await deliver_due_webhooks(db, hook_settings)
    [request] = receiver.received
    assert len(request.signatures) == 2 and all(s.startswith("v1,") for s in request.signatures)
    assert request.verified_with == [0, 1]  # each secret alone verifies the message


async def test_two_dispatchers_never_send_one_attempt_twice(
    db: Database, hook_settings: Settings, owner: Account
) -> None:
    other = Database(hook_settings.database_url, db.bus)
    try:
        async with webhook_receiver([]) as receiver:
            ids = [await new_execution(db, owner, receiver.url) for _ in range(6)]
            for execution_id in ids:
                await finish(db, execution_id)
            made = await asyncio.gather(
                deliver_due_webhooks(db, hook_settings), deliver_due_webhooks(other, hook_settings)
            )
        assert sum(made) == 6
        queued = [d.id for execution_id in ids for d in await deliveries(db, execution_id)]
        assert sorted(r.webhook_id for r in receiver.received) == sorted(queued)  # each once, none twice
    finally:
        await other.dispose()


async def test_redeliver_queues_a_new_message_of_the_completion(
    db: Database, hook_settings: Settings, owner: Account
) -> None:
    async with webhook_receiver(await secrets_of(db, hook_settings, owner.user_id)) as receiver:
        execution_id = await new_execution(db, owner, receiver.url)
        async with db.transaction() as session:
            execution = await session.get_one(Execution, execution_id)
            with pytest.raises(RedeliveryRefused) as refused:
                await redeliver(session, execution)
            assert refused.value.code == "execution_not_finished"
        await finish(db, execution_id)
        await deliver_due_webhooks(db, hook_settings)
        async with db.transaction() as session:
            again = await redeliver(session, await session.get_one(Execution, execution_id))
        await deliver_due_webhooks(db, hook_settings)
    first, second = receiver.payloads()
    assert first == second
    assert receiver.received[0].webhook_id != receiver.received[1].webhook_id == again.id
    async with db.reading() as session:
        record = await webhook_record(session, await session.get_one(Execution, execution_id))
    assert record["url"] == receiver.url
    assert [(d["status"], len(d["attempts"])) for d in record["deliveries"]] == [("succeeded", 1), ("succeeded", 1)]
    assert record["deliveries"][1]["attempts"][0]["statusCode"] == 200

    plain = await new_execution(db, owner, None, status="completed")
    async with db.transaction() as session:
        with pytest.raises(RedeliveryRefused) as refused:
            await redeliver(session, await session.get_one(Execution, plain))
        assert refused.value.code == "webhook_not_configured"
    async with db.reading() as session:
        count = await session.scalar(sa.select(sa.func.count()).select_from(WebhookDelivery))
    assert count == 2


async def test_the_dispatcher_knows_when_the_next_retry_is_due(
    db: Database, hook_settings: Settings, owner: Account
) -> None:
    from core.webhook_sender import seconds_until_next_due

    assert await seconds_until_next_due(db, utcnow) is None
    async with webhook_receiver([], [Answer(500)]) as receiver:
        execution_id = await new_execution(db, owner, receiver.url)
        await finish(db, execution_id)
        clock = clock_at_now()
        assert await seconds_until_next_due(db, clock) == 0
        await deliver_due_webhooks(db, hook_settings, clock=clock, jitter=lambda: 0.5)
    assert await seconds_until_next_due(db, clock) == pytest.approx(SCHEDULE[0])


async def test_a_url_that_cannot_be_used_is_a_recorded_failed_attempt_on_the_schedule(
    db: Database, hook_settings: Settings, owner: Account
) -> None:
    # A row from before webhookUrl refused control characters: the request cannot even be made.
    async with webhook_receiver([]) as receiver:
        broken = await new_execution(db, owner, receiver.url + "/a\r\nX-Injected: 1")
        await finish(db, broken)
        fine = await new_execution(db, owner, receiver.url)
        await finish(db, fine)
        clock = clock_at_now()
        assert await deliver_due_webhooks(db, hook_settings, clock=clock, jitter=lambda: 0.5) == 2
        assert [r.webhook_id for r in receiver.received] == [(await deliveries(db, fine))[0].id]
        [delivery] = await deliveries(db, broken)
        assert delivery.status == "pending" and delivery.locked_until is None
        assert delivery.next_attempt_at == clock.now + timedelta(seconds=SCHEDULE[0])
        [attempt] = await attempts(db, delivery.id)
        assert (attempt.number, attempt.status_code, attempt.response_excerpt) == (1, None, None)
        assert attempt.error is not None and "URL" in attempt.error
        for _ in range(MAX_ATTEMPTS - 1):
            clock.advance(2 * 86400)
            assert await deliver_due_webhooks(db, hook_settings, clock=clock) == 1
        clock.advance(2 * 86400)
        assert await deliver_due_webhooks(db, hook_settings, clock=clock) == 0
    [delivery] = await deliveries(db, broken)
    assert (delivery.status, delivery.attempts, delivery.next_attempt_at) == ("failed", MAX_ATTEMPTS, None)
    assert [a.number for a in await attempts(db, delivery.id)] == list(range(1, MAX_ATTEMPTS + 1))
    assert len(receiver.received) == 1
