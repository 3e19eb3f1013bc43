"""The per-process API-key and status-record caches (core/auth_cache.py, api/status_cache.py): each change a
request could observe reaches the next read, in this process at once and in another web process over the bus."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import timedelta

import pytest
import redis.asyncio as aioredis
import sqlalchemy as sa

from api.app import create_app
from core.accounts import revoke_api_key
from core.bus import CACHE_CHANNEL, execution_channel
from core.models import ApiKey, Execution, WebhookDelivery, utcnow
from core.settings import Settings
from core.webhook_sender import Outcome, _record, claim_due
from tests.api.helpers import decision_path, get_status, status_path, task
from tests.api.rows import insert_execution
from tests.conftest import Service, bearer, make_account
from tests.core.webhook_support import finish
from tests.support.ratelimits import REDIS_URL
from tests.support.waiting import until


def hits(service: Service) -> tuple[int, int]:
    found = service.app.extensions["vouch"]
    return found.auth_cache.entries.hits, found.status_cache.entries.hits


async def set_reviewer_behind_the_apps_back(service: Service, execution_id: str, reviewer: str) -> None:
    # A write that announces nothing, as from a process off this bus: only the TTL bounds what a cache shows.
    async with service.db.transaction() as session:
        await session.execute(
            sa.update(Execution).where(Execution.id == execution_id).values(assigned_reviewer=reviewer)
        )


async def test_a_revoked_key_is_refused_on_the_next_request_although_cached(api_only: Service) -> None:
    owner = await api_only.account("owner@example.com", "eval:manage")
    execution_id, _ = await insert_execution(api_only.db, owner)
    await get_status(api_only, owner.key, execution_id)
    before = hits(api_only)
    await get_status(api_only, owner.key, execution_id)
    assert hits(api_only) == (before[0] + 1, before[1] + 1)  # both served from the caches

    async with api_only.db.transaction() as session:
        await revoke_api_key(session, owner.key_id)
    response = await api_only.client.get(status_path(execution_id), headers=bearer(owner.key))
    assert response.status_code == 401
    assert (await response.get_json())["code"] == "api_key_revoked"


async def test_expiry_is_judged_per_request_against_the_clock(
    api_only: Service, monkeypatch: pytest.MonkeyPatch
) -> None:
    owner = await api_only.account("owner@example.com", "eval:manage")
    execution_id, _ = await insert_execution(api_only.db, owner)
    await get_status(api_only, owner.key, execution_id)
    async with api_only.db.reading() as session:
        expires_at = await session.scalar(sa.select(ApiKey.expires_at).where(ApiKey.id == owner.key_id))
    assert expires_at is not None
    monkeypatch.setattr("api.auth.utcnow", lambda: expires_at + timedelta(seconds=1))
    response = await api_only.client.get(status_path(execution_id), headers=bearer(owner.key))
    assert response.status_code == 401 and (await response.get_json())["code"] == "api_key_expired"


async def test_another_accounts_execution_is_404_even_when_cached(api_only: Service) -> None:
    owner = await api_only.account("owner@example.com", "eval:manage")
    other = await api_only.account("other@example.com", "eval:manage")
    execution_id, _ = await insert_execution(api_only.db, owner)
    await get_status(api_only, owner.key, execution_id)
    response = await api_only.client.get(status_path(execution_id), headers=bearer(other.key))
    assert response.status_code == 404


async def test_a_decision_shows_in_the_next_read(api_only: Service) -> None:
    owner = await api_only.account("owner@example.com", "eval:manage")
    execution_id, (checkpoint_id,) = await insert_execution(
        api_only.db, owner, checkpoints=1, awaiting=True, reviewer=owner.email
    )
    first = await get_status(api_only, owner.key, execution_id)
    assert first["checkpoints"][0]["decision"] is None
    answer = await api_only.client.post(
        decision_path(execution_id, checkpoint_id), json={"decision": "approve"}, headers=bearer(owner.key)
    )
    assert answer.status_code < 300, await answer.get_json()
    record = await get_status(api_only, owner.key, execution_id)
    assert record["checkpoints"][0]["decision"]["decision"] == "approve"
    assert record["status"] != "awaiting_review"


async def test_a_cancel_and_a_worker_event_show_in_the_next_read(api_only: Service) -> None:
    owner = await api_only.account("owner@example.com", "eval:manage")
    execution_id, _ = await insert_execution(api_only.db, owner, status="running")
    assert (await get_status(api_only, owner.key, execution_id))["status"] == "running"
    await finish(api_only.db, execution_id, "failed", error="boom")  # the runner's transaction and event
    record = await get_status(api_only, owner.key, execution_id)
    # A row with only the text (as failed before error codes) is served with the code `unclassified`.
    assert (record["status"], record["error"]) == ("failed", {"code": "unclassified", "detail": "boom"})

    other, _ = await insert_execution(api_only.db, owner, status="queued")
    assert (await get_status(api_only, owner.key, other))["status"] == "queued"
    cancelled = await api_only.client.post(f"/api/eval/executions/{other}/cancel", headers=bearer(owner.key))
    assert cancelled.status_code == 200
    assert (await get_status(api_only, owner.key, other))["status"] == "cancelled"


async def test_a_webhook_attempt_shows_in_the_next_read(api_only: Service) -> None:
    owner = await api_only.account("owner@example.com", "eval:manage")
    code = await api_only.client.post(
        "/api/eval/create-task-agent", json=task(webhookUrl="https://hooks.example.com/x"), headers=bearer(owner.key)
    )
    execution_id = (await code.get_json())["executionId"]
    await finish(api_only.db, execution_id)
    (delivery,) = (await get_status(api_only, owner.key, execution_id))["webhook"]["deliveries"]
    assert delivery["attempts"] == []
    # The worker's own two steps: claim the delivery, record what the receiver answered.
    claimed = await claim_due(api_only.db, lambda: utcnow() + timedelta(seconds=1), timedelta(seconds=30))
    assert isinstance(claimed, WebhookDelivery) and claimed.execution_id == execution_id
    await _record(api_only.db, claimed, utcnow(), Outcome(200, 12, "ok", None), utcnow, lambda: 0.5)
    (delivery,) = (await get_status(api_only, owner.key, execution_id))["webhook"]["deliveries"]
    assert delivery["status"] == "succeeded" and [a["statusCode"] for a in delivery["attempts"]] == [200]


async def test_the_ttl_bounds_what_a_silent_writer_leaves_stale(api_only: Service) -> None:
    owner = await api_only.account("owner@example.com", "eval:manage")
    execution_id, _ = await insert_execution(api_only.db, owner, reviewer="a@example.com")
    assert (await get_status(api_only, owner.key, execution_id))["assignedReviewer"] == "a@example.com"
    await set_reviewer_behind_the_apps_back(api_only, execution_id, "b@example.com")
    # Unannounced: the cache still serves the old record (this is what the TTL is for)...
    assert (await get_status(api_only, owner.key, execution_id))["assignedReviewer"] == "a@example.com"
    # ...until the entry's age passes the TTL: then it is read again.
    cache = api_only.app.extensions["vouch"].status_cache.entries
    later = cache._clock() + cache.ttl + 0.001
    cache._clock = lambda: later
    assert (await get_status(api_only, owner.key, execution_id))["assignedReviewer"] == "b@example.com"


@pytest.fixture
async def uncached(settings: Settings) -> AsyncIterator[Service]:
    app = create_app(settings.with_changes(auth_cache_seconds=0, status_cache_seconds=0))
    async with app.test_app() as test_app:
        yield Service(app, test_app.test_client(), settings)


async def test_a_ttl_of_zero_turns_both_caches_off(uncached: Service) -> None:
    owner = await uncached.account("owner@example.com", "eval:manage")
    execution_id, _ = await insert_execution(uncached.db, owner, reviewer="a@example.com")
    await get_status(uncached, owner.key, execution_id)
    await set_reviewer_behind_the_apps_back(uncached, execution_id, "b@example.com")
    assert (await get_status(uncached, owner.key, execution_id))["assignedReviewer"] == "b@example.com"
    async with uncached.db.transaction() as session:  # silently, as the CLI of another process would
        await session.execute(sa.update(ApiKey).where(ApiKey.id == owner.key_id).values(revoked_at=utcnow()))
    response = await uncached.client.get(status_path(execution_id), headers=bearer(owner.key))
    assert response.status_code == 401
    assert hits(uncached) == (0, 0) and len(uncached.app.extensions["vouch"].status_cache.entries) == 0


@pytest.fixture
async def two_web_processes(settings: Settings) -> AsyncIterator[tuple[Service, Service]]:
    """Two apps sharing one database and one Redis, as two web processes behind a balancer."""
    # TTLs far longer than the test: only the bus can make the second process forget.
    shared = settings.with_changes(redis_url=REDIS_URL, auth_cache_seconds=300, status_cache_seconds=300)
    first, second = create_app(shared), create_app(shared)
    async with first.test_app() as one, second.test_app() as two:
        yield Service(first, one.test_client(), shared), Service(second, two.test_client(), shared)


async def test_with_redis_another_web_process_refuses_a_revoked_key_after_the_bus_hop(
    two_web_processes: tuple[Service, Service],
) -> None:
    first, second = two_web_processes
    await until(lambda: _true(second.app.extensions["vouch"].cache_listening.healthy))
    owner = await make_account(first.db, first.settings, "owner@example.com", "eval:manage")
    execution_id, _ = await insert_execution(first.db, owner)

    async def holds_the_key() -> bool | None:
        before = hits(second)[0]
        await get_status(second, owner.key, execution_id)
        return True if hits(second)[0] > before else None

    # Parallel tests share this Redis and its cache channel: a key or user invalidation of theirs arriving during
    # this process's fill refuses to store what the fill read (core/cache.py invalidate_where), so the next
    # request may miss again. What matters is that the second process comes to hold the key.
    await until(holds_the_key, timeout=5)

    async def refused() -> bool | None:
        response = await second.client.get(status_path(execution_id), headers=bearer(owner.key))
        return True if response.status_code == 401 else None

    async with first.db.transaction() as session:  # revoked through the first process
        await revoke_api_key(session, owner.key_id)
    await until(refused, bus=second.db.bus, channel=CACHE_CHANNEL, timeout=5)


async def test_with_redis_a_web_process_hears_the_news_of_the_executions_it_reads_and_no_others(
    two_web_processes: tuple[Service, Service],
) -> None:
    first, second = two_web_processes
    statuses = second.app.extensions["vouch"].status_cache
    await until(lambda: _true(second.app.extensions["vouch"].cache_listening.healthy))
    owner = await make_account(first.db, first.settings, "owner@example.com", "eval:manage")
    read, unread = [(await insert_execution(first.db, owner, status="running"))[0] for _ in range(2)]
    admin = aioredis.Redis.from_url(REDIS_URL)

    async def subscribers(execution_id: str) -> int:
        [(_, count)] = await admin.pubsub_numsub(execution_channel(execution_id))
        return int(count)

    def cached(execution_id: str) -> Callable[[], Awaitable[bool | None]]:
        async def check() -> bool | None:
            before = hits(second)[1]
            await get_status(second, owner.key, execution_id)
            return True if hits(second)[1] > before else None

        return check

    try:
        # The first read asks for the execution's news; a read once it is heard is stored.
        await until(cached(read), timeout=5)
        assert (await subscribers(read), await subscribers(unread)) == (1, 0)

        await finish(first.db, read, "failed", error="boom")  # committed and announced by the first process

        async def shows_the_end() -> bool | None:
            return True if (await get_status(second, owner.key, read))["status"] == "failed" else None

        await until(shows_the_end, bus=second.db.bus, channel=execution_channel(read), timeout=5)

        # Past the bound, the least recently filled is let go, and its entry with it: a change nobody announces
        # shows in its next read at once, not after the TTL.
        statuses.max_followed = 1
        await until(cached(unread), timeout=5)
        await until(lambda: _true_async(subscribers, read, 0), timeout=5)
        await set_reviewer_behind_the_apps_back(first, read, "late@example.com")
        assert (await get_status(second, owner.key, read))["assignedReviewer"] == "late@example.com"
    finally:
        await admin.aclose()


async def _true_async(count: Callable[[str], Awaitable[int]], execution_id: str, expected: int) -> bool | None:
    return True if await count(execution_id) == expected else None


async def _true(value: bool) -> bool | None:
    return True if value else None
