"""GET /api/eval/executions: one's own executions, newest first, filtered by status, in stable pages."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
import sqlalchemy as sa

from api.cursors import Position, encode_cursor
from core.models import Execution, utcnow
from tests.api.helpers import REVIEWER, account, assert_problem, create_ok, get_status, task
from tests.api.rows import insert_execution
from tests.conftest import Account, Service, bearer

LIST = "/api/eval/executions"
ITEM_KEYS = {
    "executionId",
    "taskName",
    "status",
    "testMode",
    "assignedReviewer",
    "createdAt",
    "completedAt",
    "checkpointCount",
    "chatUrl",
}


async def list_page(service: Service, acct: Account, query: str = "") -> tuple[int, dict[str, Any]]:
    response = await service.client.get(f"{LIST}{'?' + query if query else ''}", headers=bearer(acct.key))
    return response.status_code, await response.get_json()


async def test_pages_have_no_duplicates_or_gaps_while_executions_are_created(api_only: Service) -> None:
    acct = await account(api_only, "owner@example.com", "eval:manage")
    base = utcnow() - timedelta(hours=1)
    # Groups of three share a creation time, so page boundaries fall inside ties (ordered by id there).
    existing = [
        (await insert_execution(api_only.db, acct, created_at=base + timedelta(seconds=i // 3)))[0] for i in range(25)
    ]
    async with api_only.db.reading() as session:
        expected = list(
            await session.scalars(
                sa.select(Execution.id)
                .where(Execution.id.in_(existing))
                .order_by(Execution.created_at.desc(), Execution.id.desc())
            )
        )
    seen: list[str] = []
    newer: list[str] = []
    query = "limit=7"
    while True:
        code, page = await list_page(api_only, acct, query)
        assert code == 200, page
        assert len(page["items"]) <= 7
        seen.extend(item["executionId"] for item in page["items"])
        # Created between pages: newer than every cursor handed out, so never on a later page.
        newer.append((await insert_execution(api_only.db, acct))[0])
        if page["nextCursor"] is None:
            break
        query = f"limit=7&cursor={page['nextCursor']}"
    assert seen == expected
    assert len(seen) == len(set(seen)) == 25
    code, first = await list_page(api_only, acct, "limit=100")
    assert [i["executionId"] for i in first["items"][: len(newer)]] == list(reversed(newer))


async def test_list_items_and_newest_first(api_only: Service) -> None:
    acct = await account(api_only, "owner@example.com", "eval:manage")
    code, empty = await list_page(api_only, acct)
    assert (code, empty) == (200, {"success": True, "items": [], "nextCursor": None})
    older = await create_ok(api_only, acct.key, task(taskName="older"))
    newer = await create_ok(
        api_only,
        acct.key,
        task(
            taskName="newer",
            assignedReviewer=REVIEWER,
            checkpoints=[{"stage": "a", "verificationQuestion": "a?"}, {"stage": "b", "verificationQuestion": "b?"}],
        ),
    )
    code, page = await list_page(api_only, acct)
    assert code == 200 and page["nextCursor"] is None
    assert [i["executionId"] for i in page["items"]] == [newer, older]
    item = page["items"][0]
    assert set(item) == ITEM_KEYS
    record = await get_status(api_only, acct.key, newer)
    for key in ITEM_KEYS - {"executionId"}:
        assert item[key] == record[key], key
    assert item["checkpointCount"] == 2 and page["items"][1]["checkpointCount"] == 0


async def test_status_filter(api_only: Service, subtests: pytest.Subtests) -> None:
    acct = await account(api_only, "owner@example.com", "eval:manage")
    made: dict[str, list[str]] = {}
    for status in ("queued", "queued", "running", "completed", "cancelled", "failed"):
        made.setdefault(status, []).append((await insert_execution(api_only.db, acct, status=status))[0])
    cases = [
        ("status=queued", {"queued"}),
        ("status=queued,cancelled", {"queued", "cancelled"}),
        ("status=completed&status=failed", {"completed", "failed"}),
        ("status=awaiting_review", set()),
        ("status=queued&limit=1", {"queued"}),
    ]
    for query, statuses in cases:
        with subtests.test(msg=query):
            code, page = await list_page(api_only, acct, query)
            assert code == 200, page
            got = [i["executionId"] for i in page["items"]]
            wanted = {e for s in statuses for e in made[s]}
            if "limit=1" in query:
                assert len(got) == 1 and set(got) <= wanted and page["nextCursor"] is not None
                code, rest = await list_page(api_only, acct, f"{query}&cursor={page['nextCursor']}")
                got += [i["executionId"] for i in rest["items"]]
            assert sorted(got) == sorted(wanted)
            assert all(i["status"] in statuses for i in page["items"])


async def test_list_shows_only_own_executions(api_only: Service) -> None:
    alice = await account(api_only, "alice@example.com", "eval:read")
    bob = await account(api_only, "bob@example.com", "eval:manage")
    mine = (await insert_execution(api_only.db, alice))[0]
    await insert_execution(api_only.db, bob)
    # Bob being Alice's reviewer does not put his executions in her list, nor hers in his.
    await insert_execution(api_only.db, bob, reviewer=alice.email, checkpoints=1)
    code, page = await list_page(api_only, alice)
    assert code == 200 and [i["executionId"] for i in page["items"]] == [mine]


async def test_limits_and_bad_parameters(api_only: Service, subtests: pytest.Subtests) -> None:
    acct = await account(api_only, "owner@example.com", "eval:read")
    for _ in range(101):
        await insert_execution(api_only.db, acct)
    for query, size in (("", 20), ("limit=1", 1), ("limit=100", 100)):
        with subtests.test(msg=f"ok {query or 'default'}"):
            code, page = await list_page(api_only, acct, query)
            assert code == 200 and len(page["items"]) == size and page["nextCursor"]
    code, page = await list_page(api_only, acct, "limit=100")
    tampered = page["nextCursor"][:-3] + ("AAA" if not page["nextCursor"].endswith("AAA") else "BBB")
    # Well formed, but signed with another key: a caller cannot make up positions.
    forged = encode_cursor(b"not-this-service-" * 3, Position(utcnow(), "exe_zzzzzzzzzzzzzzzzzzzzzzzzzz"))
    bad = [
        ("limit=0", 422, "validation_failed"),
        ("limit=101", 422, "validation_failed"),
        ("limit=-1", 422, "validation_failed"),
        ("limit=ten", 422, "validation_failed"),
        ("status=done", 422, "validation_failed"),
        ("status=queued,bogus", 422, "validation_failed"),
        ("stauts=queued", 422, "validation_failed"),
        ("cursor=not-a-cursor", 400, "invalid_cursor"),
        (f"cursor={tampered}", 400, "invalid_cursor"),
        (f"cursor={forged}", 400, "invalid_cursor"),
    ]
    for query, status, code_ in bad:
        with subtests.test(msg=query[:30]):
            response = await api_only.client.get(f"{LIST}?{query}", headers=bearer(acct.key))
            payload = await response.get_json()
            assert_problem(response, payload, status, code_)
            assert payload["errors"][0]["parameter"] == query.split("=")[0]
