"""At most 10 executions in progress per key: exact under 50 parallel creates, on SQLite and PostgreSQL.

No worker runs (`api_only`, or a live server without one), so created executions stay queued; tests move them
between states by writing the rows, as a worker or a cancel would.
"""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import sqlalchemy as sa

from core.accounts import create_api_key, create_user
from core.db import Database
from core.models import Execution
from core.settings import Settings
from tests.api.helpers import CREATE, account, add_key, assert_problem, task
from tests.conftest import Service, bearer
from tests.support.live import live_server
from tests.support.ratelimits import serving


async def create(service: Service, key: str) -> Any:
    return await service.client.post(CREATE, json=task(), headers=bearer(key))


async def set_status(db: Database, execution_ids: list[str], status: str) -> None:
    async with db.transaction() as session:
        await session.execute(sa.update(Execution).where(Execution.id.in_(execution_ids)).values(status=status))


async def statuses_of(db: Database, key_id: str) -> list[str]:
    async with db.reading() as session:
        return sorted(await session.scalars(sa.select(Execution.status).where(Execution.api_key_id == key_id)))


def codes_of(responses: list[Any]) -> tuple[int, int]:
    codes = [r.status_code for r in responses]
    assert set(codes) <= {201, 429}, codes
    return codes.count(201), codes.count(429)


async def test_fifty_parallel_creates_admit_exactly_ten(api_only: Service) -> None:
    acct = await account(api_only, "owner@example.com", "eval:create")
    responses = await asyncio.gather(*(create(api_only, acct.key) for _ in range(50)))
    assert codes_of(responses) == (10, 40)
    assert await statuses_of(api_only.db, acct.key_id) == ["queued"] * 10
    refused = next(r for r in responses if r.status_code == 429)
    payload = await refused.get_json()
    assert_problem(refused, payload, 429, "concurrent_limit_exceeded", "Too Many Requests")
    assert refused.headers["Retry-After"] == "30"
    assert "already has 10 executions in progress (10 queued)" in payload["detail"]
    assert "at most 10" in payload["detail"]
    # A refused create still counts as a request: it carries the rate-limit headers too.
    assert "X-RateLimit-Remaining" in refused.headers

    # One finishes (here: is cancelled): exactly one more fits.
    async with api_only.db.reading() as session:
        first = await session.scalar(sa.select(Execution.id).where(Execution.api_key_id == acct.key_id).limit(1))
    assert first is not None
    await set_status(api_only.db, [first], "cancelled")
    assert (await create(api_only, acct.key)).status_code == 201
    assert (await create(api_only, acct.key)).status_code == 429


async def test_queued_running_and_awaiting_review_count_finished_ones_do_not(api_only: Service) -> None:
    acct = await account(api_only, "owner@example.com", "eval:create")
    ids = [(await (await create(api_only, acct.key)).get_json())["executionId"] for _ in range(10)]
    await set_status(api_only.db, ids[:3], "running")
    await set_status(api_only.db, ids[3:5], "awaiting_review")
    refused = await create(api_only, acct.key)
    detail = (await refused.get_json())["detail"]
    assert refused.status_code == 429
    assert "10 executions in progress (5 queued, 3 running, 2 awaiting review)" in detail
    for n, final in enumerate(("completed", "failed", "rejected", "cancelled")):
        await set_status(api_only.db, [ids[5 + n]], final)
    assert codes_of([await create(api_only, acct.key) for _ in range(5)]) == (4, 1)


async def test_the_limit_is_per_key(api_only: Service) -> None:
    acct = await account(api_only, "owner@example.com", "eval:create")
    _, second_key = await add_key(api_only, acct.email, "eval:create")
    stranger = await account(api_only, "stranger@example.com", "eval:create")
    assert codes_of([await create(api_only, acct.key) for _ in range(11)]) == (10, 1)
    # The same user's other key, and another user's key, have their own ten.
    assert codes_of(await asyncio.gather(*(create(api_only, second_key) for _ in range(12)))) == (10, 2)
    assert codes_of(await asyncio.gather(*(create(api_only, stranger.key) for _ in range(12)))) == (10, 2)


async def test_the_limit_comes_from_the_settings(settings: Settings) -> None:
    async with serving(settings.with_changes(concurrency_limit=3)) as service:
        acct = await account(service, "owner@example.com", "eval:create")
        responses = await asyncio.gather(*(create(service, acct.key) for _ in range(8)))
    assert codes_of(responses) == (3, 5)


async def test_fifty_parallel_creates_over_real_http_admit_exactly_ten(settings: Settings, db: Database) -> None:
    async with db.transaction() as session:
        user = await create_user(session, "owner@example.com")
        new = await create_api_key(session, user, name="t", scopes=["eval:create"], secret_key=settings.secret_key)
    with live_server(settings, run_worker=False) as base:
        limits = httpx.Limits(max_connections=50)
        async with httpx.AsyncClient(base_url=base, headers=bearer(new.secret), limits=limits, timeout=60) as client:
            responses = await asyncio.gather(*(client.post(CREATE, json=task()) for _ in range(50)))
    assert codes_of(responses) == (10, 40)
    assert {r.json()["code"] for r in responses if r.status_code == 429} == {"concurrent_limit_exceeded"}
    assert await statuses_of(db, new.record.id) == ["queued"] * 10
