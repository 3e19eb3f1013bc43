"""Idempotency-Key on create: replay, conflicts, expiry, bad keys and concurrent retries."""

from __future__ import annotations

import asyncio
import json
from datetime import timedelta
from typing import Any

import pytest
import sqlalchemy as sa

import api.tasks
from api.idempotency import REPLAYED_HEADER, request_fingerprint
from core.ids import new_id
from core.models import Execution, IdempotencyRecord, utcnow
from tests.api.helpers import CREATE, account, assert_problem, task
from tests.conftest import Account, Service, bearer

KEY = "order-7f3a"


async def post(service: Service, acct: Account, body: Any, key: str | None = KEY, **headers: str) -> Any:
    if key is not None:
        headers["Idempotency-Key"] = key
    return await service.client.post(CREATE, json=body, headers={**bearer(acct.key), **headers})


async def executions_of(service: Service, acct: Account) -> list[str]:
    async with service.db.reading() as session:
        return list(await session.scalars(sa.select(Execution.id).where(Execution.user_id == acct.user_id)))


async def record_of(service: Service, acct: Account, key: str = KEY) -> IdempotencyRecord | None:
    async with service.db.reading() as session:
        found: IdempotencyRecord | None = await session.scalar(
            sa.select(IdempotencyRecord).where(IdempotencyRecord.user_id == acct.user_id, IdempotencyRecord.key == key)
        )
        return found


async def put_record(service: Service, acct: Account, body: Any, **fields: Any) -> None:
    """Commit a record directly, as a request (or a crashed one) would have left it."""
    now = utcnow()
    values: dict[str, Any] = {
        "id": new_id("idem"),
        "user_id": acct.user_id,
        "key": KEY,
        "request_hash": request_fingerprint("POST", CREATE, json.dumps(body).encode()),
        "state": "in_flight",
        "created_at": now,
        "expires_at": now + timedelta(hours=24),
    }
    values.update(fields)
    async with service.db.transaction() as session:
        session.add(IdempotencyRecord(**values))


async def test_same_key_and_body_replays_the_first_answer(api_only: Service) -> None:
    acct = await account(api_only, "owner@example.com", "eval:create")
    body = task(webhookUrl="https://hooks.example.com/x")
    first = await post(api_only, acct, body)
    assert first.status_code == 201, await first.get_json()
    assert REPLAYED_HEADER not in first.headers

    # The same JSON with its keys in another order and other spacing is the same request.
    reordered = json.dumps(dict(reversed(list(body.items()))), indent=2)
    again = await api_only.client.post(
        CREATE,
        data=reordered,
        headers={**bearer(acct.key), "Idempotency-Key": KEY, "Content-Type": "application/json"},
    )
    assert again.status_code == 201
    assert again.headers[REPLAYED_HEADER] == "true"
    assert await again.get_data() == await first.get_data()
    assert again.headers["Location"] == first.headers["Location"]
    assert again.headers["X-Request-Id"] != first.headers["X-Request-Id"]
    assert await executions_of(api_only, acct) == [(await first.get_json())["executionId"]]


async def test_keys_are_scoped_per_user(api_only: Service) -> None:
    alice = await account(api_only, "alice@example.com", "eval:create")
    bob = await account(api_only, "bob@example.com", "eval:create")
    a = await post(api_only, alice, task())
    b = await post(api_only, bob, task())
    assert a.status_code == b.status_code == 201
    assert REPLAYED_HEADER not in b.headers
    assert (await a.get_json())["executionId"] != (await b.get_json())["executionId"]
    assert len(await executions_of(api_only, alice)) == len(await executions_of(api_only, bob)) == 1


async def test_same_key_other_body_is_422(api_only: Service) -> None:
    acct = await account(api_only, "owner@example.com", "eval:create")
    assert (await post(api_only, acct, task())).status_code == 201
    response = await post(api_only, acct, task(taskName="Something else"))
    assert_problem(response, await response.get_json(), 422, "idempotency_key_reused")
    assert len(await executions_of(api_only, acct)) == 1


async def test_request_in_flight_is_409(api_only: Service) -> None:
    acct = await account(api_only, "owner@example.com", "eval:create")
    await put_record(api_only, acct, task())
    response = await post(api_only, acct, task())
    assert_problem(response, await response.get_json(), 409, "idempotency_key_in_use")
    assert response.headers["Retry-After"]
    assert await executions_of(api_only, acct) == []
    # The other request's marker is left alone.
    record = await record_of(api_only, acct)
    assert record is not None and record.state == "in_flight"


async def test_held_first_request_makes_the_second_409(api_only: Service, monkeypatch: pytest.MonkeyPatch) -> None:
    """Hold a real first request inside the create view, after its marker is committed.

    It is held where the view starts (reading the body), before it opens its own transaction:
    on SQLite that transaction holds the one write lock, which the second request needs to authenticate.
    """
    acct = await account(api_only, "owner@example.com", "eval:create")
    entered, release = asyncio.Event(), asyncio.Event()
    real_json_body = api.tasks.json_body

    async def held_json_body() -> Any:
        body = await real_json_body()
        entered.set()
        await release.wait()
        return body

    monkeypatch.setattr(api.tasks, "json_body", held_json_body)
    first = asyncio.create_task(post(api_only, acct, task()))
    try:
        await asyncio.wait_for(entered.wait(), 10)
        record = await record_of(api_only, acct)
        assert record is not None and record.state == "in_flight"
        second = await asyncio.wait_for(post(api_only, acct, task()), 10)
        assert_problem(second, await second.get_json(), 409, "idempotency_key_in_use")
    finally:
        release.set()
        first_response = await asyncio.wait_for(first, 10)
    assert first_response.status_code == 201
    third = await post(api_only, acct, task())
    assert third.status_code == 201 and third.headers[REPLAYED_HEADER] == "true"
    assert await third.get_data() == await first_response.get_data()
    assert len(await executions_of(api_only, acct)) == 1


async def test_failed_create_frees_the_key(api_only: Service, subtests: pytest.Subtests) -> None:
    acct = await account(api_only, "owner@example.com", "eval:create")
    failures = [
        ("422 invalid field", task(testMode="sometimes")),
        ("400 not an object", ["not", "an", "object"]),
    ]
    for name, body in failures:
        with subtests.test(msg=name):
            response = await post(api_only, acct, body)
            assert response.status_code == int(name[:3])
            assert await record_of(api_only, acct) is None
    # The caller fixes the body and retries with the same key: a fresh create, not a 422 "other body".
    response = await post(api_only, acct, task())
    assert response.status_code == 201 and REPLAYED_HEADER not in response.headers
    record = await record_of(api_only, acct)
    assert record is not None and record.state == "done" and record.response_status == 201


async def test_expired_record_is_replaced(api_only: Service) -> None:
    acct = await account(api_only, "owner@example.com", "eval:create")
    old = utcnow() - timedelta(hours=25)
    stale_body = task(taskName="Yesterday")
    await put_record(
        api_only,
        acct,
        stale_body,
        state="done",
        response_status=201,
        response_body={"success": True, "executionId": "exe_old"},
        response_headers={},
        created_at=old,
        expires_at=old + timedelta(hours=24),
    )
    response = await post(api_only, acct, task())  # another body: would be 422 if the record still counted
    payload = await response.get_json()
    assert response.status_code == 201 and REPLAYED_HEADER not in response.headers, payload
    assert payload["executionId"] != "exe_old"
    record = await record_of(api_only, acct)
    assert record is not None and record.response_body is not None
    assert record.response_body["executionId"] == payload["executionId"]
    assert record.expires_at > utcnow() + timedelta(hours=23)


async def test_marker_of_a_dead_request_lapses(api_only: Service) -> None:
    acct = await account(api_only, "owner@example.com", "eval:create")
    await put_record(api_only, acct, task(), created_at=utcnow() - timedelta(minutes=6))
    response = await post(api_only, acct, task())
    assert response.status_code == 201, await response.get_json()
    assert len(await executions_of(api_only, acct)) == 1


BAD_KEYS = [
    ("empty", ""),
    ("blank", "   "),
    ("too long", "k" * 256),
    ("non-ascii", "clé-1"),
    ("tab", "a\tb"),
    ("empty quoted", '""'),
]


async def test_invalid_key_is_400(api_only: Service, subtests: pytest.Subtests) -> None:
    acct = await account(api_only, "owner@example.com", "eval:create")
    for name, key in BAD_KEYS:
        with subtests.test(msg=name):
            response = await post(api_only, acct, task(), key=key)
            assert_problem(response, await response.get_json(), 400, "invalid_idempotency_key")
    assert await executions_of(api_only, acct) == []
    for name, key in (("255 characters", "k" * 255), ("punctuation", "a:b/c=d e~"), ("quoted", '"abc"')):
        with subtests.test(msg=f"valid: {name}"):
            response = await post(api_only, acct, task(), key=key)
            assert response.status_code == 201, await response.get_json()


async def test_concurrent_retries_create_exactly_one_execution(api_only: Service) -> None:
    acct = await account(api_only, "owner@example.com", "eval:create")
    responses = await asyncio.gather(*(post(api_only, acct, task()) for _ in range(8)))
    codes = sorted(r.status_code for r in responses)
    assert set(codes) <= {201, 409}, codes
    created = [r for r in responses if r.status_code == 201]
    fresh = [r for r in created if REPLAYED_HEADER not in r.headers]
    assert len(fresh) == 1, codes
    ids = {(await r.get_json())["executionId"] for r in created}
    assert len(ids) == 1
    assert await executions_of(api_only, acct) == list(ids)


async def test_without_a_key_nothing_is_recorded(api_only: Service) -> None:
    acct = await account(api_only, "owner@example.com", "eval:create")
    assert (await post(api_only, acct, task(), key=None)).status_code == 201
    assert (await post(api_only, acct, task(), key=None)).status_code == 201
    assert len(await executions_of(api_only, acct)) == 2
    async with api_only.db.reading() as session:
        assert await session.scalar(sa.select(sa.func.count()).select_from(IdempotencyRecord)) == 0
