"""A reviewer named for a run who is the address of a disabled account is refused where a run is named its reviewer
(create, PATCH, a suite's tasks), with a 422 naming the field: such a reviewer could decide nothing, and the run
would wait for nobody. An address without an account, or an enabled account's, is a reviewer as before."""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa

from core.accounts import create_user, disable_user
from core.models import SUITES, Execution
from tests.api.helpers import CREATE, REVIEWER, account, assert_problem, create, create_ok, get_status, task
from tests.api.test_manage_endpoints import patch
from tests.api.test_suites import ALL, post, suite
from tests.api.test_suites import SUITES as SUITES_PATH
from tests.conftest import Service, bearer

GONE = "gone@example.com"
CHECKPOINT = {"stage": "Send", "description": "The mail", "verificationQuestion": "Send it?"}


async def disabled_account(service: Service, email: str = GONE) -> None:
    async with service.db.transaction() as session:
        assert await disable_user(session, await create_user(session, email))


async def executions(service: Service) -> int:
    async with service.db.reading() as session:
        return int(await session.scalar(sa.select(sa.func.count()).select_from(Execution)) or 0)


def assert_names(payload: dict[str, Any], pointer: str) -> None:
    assert payload["errors"][0]["pointer"] == pointer, payload
    assert GONE in payload["detail"] and "disabled" in payload["detail"], payload


async def test_create_refuses_a_disabled_accounts_address_as_either_reviewer(api_only: Service) -> None:
    acct = await account(api_only, "owner@example.com", "eval:create", "eval:read")
    await disabled_account(api_only)
    for fields, pointer in (
        ({"assignedReviewer": GONE}, "/assignedReviewer"),
        ({"assignedReviewer": REVIEWER, "backupReviewer": GONE}, "/backupReviewer"),
    ):
        for checkpoints in ([], [CHECKPOINT]):  # one statement alone, and with the checkpoints' rows after it
            response = await api_only.client.post(
                CREATE, json=task(checkpoints=checkpoints, **fields), headers=bearer(acct.key)
            )
            payload = await response.get_json()
            assert_problem(response, payload, 422, "validation_failed")
            assert_names(payload, pointer)
    assert await executions(api_only) == 0

    # Enabled accounts and addresses with no account at all review as before.
    await account(api_only, REVIEWER, "eval:read")
    for reviewer in (REVIEWER, "no-account@example.com"):
        execution_id = await create_ok(api_only, acct.key, task(checkpoints=[CHECKPOINT], assignedReviewer=reviewer))
        assert (await get_status(api_only, acct.key, execution_id))["assignedReviewer"] == reviewer


async def test_patch_refuses_a_disabled_accounts_address_and_keeps_the_reviewer(api_only: Service) -> None:
    acct = await account(api_only, "owner@example.com", "eval:create", "eval:read", "eval:manage")
    execution_id = await create_ok(api_only, acct.key, task(checkpoints=[CHECKPOINT], assignedReviewer=REVIEWER))
    await disabled_account(api_only)
    response, payload = await patch(api_only, acct, execution_id, {"assignedReviewer": GONE})
    assert_problem(response, payload, 422, "validation_failed")
    assert_names(payload, "/assignedReviewer")
    assert (await get_status(api_only, acct.key, execution_id))["assignedReviewer"] == REVIEWER


async def test_a_suite_naming_a_disabled_accounts_address_is_refused_with_the_task(api_only: Service) -> None:
    acct = await account(api_only, "owner@example.com", *ALL)
    await disabled_account(api_only)
    body = suite(tasks=[task(assignedReviewer=REVIEWER), task(assignedReviewer=REVIEWER, backupReviewer=GONE)])
    response, payload = await post(api_only, acct.key, body)
    assert_problem(response, payload, 422, "validation_failed")
    assert_names(payload, "/tasks/1/backupReviewer")
    assert payload["detail"].startswith("tasks[1].backupReviewer: ")
    async with api_only.db.reading() as session:
        assert await session.scalar(sa.select(sa.func.count()).select_from(SUITES)) == 0
    listed = await api_only.client.get(SUITES_PATH, headers=bearer(acct.key))
    assert (await listed.get_json())["suites"] == []


async def test_create_status_for_an_unrelated_refusal_stays_the_slot_answer(api_only: Service) -> None:
    # The statement's reviewer condition and the slot condition refuse alike; the answer names the right one.
    acct = await account(api_only, "owner@example.com", "eval:create", "eval:read")
    limit = api_only.settings.concurrency_limit
    body = task(checkpoints=[CHECKPOINT], assignedReviewer=REVIEWER)
    for _ in range(limit):
        await create_ok(api_only, acct.key, body)
    status, payload = await create(api_only, acct.key, body)
    assert status == 429, payload
