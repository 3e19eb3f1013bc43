"""Every /api route, with every kind of credential → the expected status (spec §5, §7).

Each route gets a fresh target in the state its success needs, so a refused request can be checked to
have changed nothing and an allowed one to have done its work.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import pytest
import sqlalchemy as sa

from core.accounts import revoke_api_key
from core.models import ApiKey, Execution, Suite, SuiteRun, WebhookDelivery, utcnow
from review.grade_request import request_grade
from tests.api.helpers import CREATE, account, add_key, assert_problem, decision_path, status_path, task
from tests.api.rows import insert_execution
from tests.conftest import Account, Service, bearer


@dataclass(frozen=True)
class Target:
    execution_id: str
    checkpoint_id: str
    suite_id: str = "none"


@dataclass(frozen=True)
class Route:
    name: str
    rule: tuple[str, str]  # (method, URL rule), to check that the table covers every /api route
    scope: str
    success: int
    prepare: Callable[[Service, Account], Awaitable[Target]]
    call: Callable[[Service, Target, dict[str, str]], Awaitable[Any]]


async def queued(service: Service, owner: Account) -> Target:
    execution_id, checkpoints = await insert_execution(service.db, owner, reviewer=owner.email, checkpoints=1)
    return Target(execution_id, checkpoints[0])


async def finished(service: Service, owner: Account) -> Target:
    execution_id, checkpoints = await insert_execution(
        service.db, owner, status="completed", reviewer=owner.email, checkpoints=1
    )
    return Target(execution_id, checkpoints[0])


async def awaiting(service: Service, owner: Account) -> Target:
    execution_id, checkpoints = await insert_execution(
        service.db, owner, reviewer=owner.email, checkpoints=1, awaiting=True
    )
    return Target(execution_id, checkpoints[0])


async def external(service: Service, owner: Account) -> Target:
    execution_id, checkpoints = await insert_execution(
        service.db, owner, reviewer=owner.email, checkpoints=1, agent_model="external"
    )
    return Target(execution_id, checkpoints[0])


async def finished_with_webhook(service: Service, owner: Account) -> Target:
    target = await finished(service, owner)
    async with service.db.transaction() as session:
        await session.execute(
            sa.update(Execution).where(Execution.id == target.execution_id).values(webhook_url="https://x.example.com/")
        )
    return target


async def grading(service: Service, owner: Account) -> Target:
    """A completed run whose `human` scorer's grade waits (issue 23), opened as the scoring worker opens it."""
    target = await finished(service, owner)
    human = {"type": "human", "name": "human", "deadline": None}
    async with service.db.transaction() as session:
        await session.execute(
            sa.update(Execution)
            .where(Execution.id == target.execution_id)
            .values(scorers=[human], verdict_state="pending")
        )
        assert await request_grade(session, service.settings, target.execution_id, human, [])
    return target


async def suite(service: Service, owner: Account) -> Target:
    """A running suite of the owner's (issue 23): one of its two runs started, the other waiting for a slot."""
    target = await queued(service, owner)
    body = {"name": "Nightly", "tasks": [task(), task(taskName="Second")], "models": ["offline"]}
    response = await service.client.post("/api/eval/suites", json=body, headers=bearer(owner.key))
    assert response.status_code == 201, await response.get_json()
    return Target(target.execution_id, target.checkpoint_id, (await response.get_json())["suiteId"])


def suites_path(target: Target, action: str = "") -> str:
    return f"/api/eval/suites/{target.suite_id}{'/' + action if action else ''}"


def executions_path(target: Target, action: str = "") -> str:
    return f"/api/eval/executions/{target.execution_id}{'/' + action if action else ''}"


ROUTES = [
    Route(
        "POST create-task-agent",
        ("POST", "/api/eval/create-task-agent"),
        "eval:create",
        201,
        queued,
        lambda s, t, h: s.client.post(CREATE, json=task(), headers=h),
    ),
    Route(
        "GET status",
        ("GET", "/api/eval/status/<execution_id>"),
        "eval:read",
        200,
        queued,
        lambda s, t, h: s.client.get(status_path(t.execution_id), headers=h),
    ),
    Route(
        "GET executions",
        ("GET", "/api/eval/executions"),
        "eval:read",
        200,
        queued,
        lambda s, t, h: s.client.get("/api/eval/executions", headers=h),
    ),
    Route(
        "GET models",
        ("GET", "/api/eval/models"),
        "eval:read",
        200,
        queued,
        lambda s, t, h: s.client.get("/api/eval/models", headers=h),
    ),
    Route(
        "PATCH execution",
        ("PATCH", "/api/eval/executions/<execution_id>"),
        "eval:manage",
        200,
        queued,
        lambda s, t, h: s.client.patch(executions_path(t), json={"webhookUrl": "https://x.example.com/"}, headers=h),
    ),
    Route(
        "POST cancel",
        ("POST", "/api/eval/executions/<execution_id>/cancel"),
        "eval:manage",
        200,
        queued,
        lambda s, t, h: s.client.post(executions_path(t, "cancel"), headers=h),
    ),
    Route(
        "DELETE execution",
        ("DELETE", "/api/eval/executions/<execution_id>"),
        "eval:manage",
        204,
        finished,
        lambda s, t, h: s.client.delete(executions_path(t), headers=h),
    ),
    Route(
        "POST webhook redeliver",
        ("POST", "/api/eval/executions/<execution_id>/webhook/redeliver"),
        "eval:manage",
        202,
        finished_with_webhook,
        lambda s, t, h: s.client.post(executions_path(t, "webhook/redeliver"), headers=h),
    ),
    Route(
        "POST external events",
        ("POST", "/api/eval/executions/<execution_id>/events"),
        "eval:create",
        200,
        external,
        lambda s, t, h: s.client.post(
            executions_path(t, "events"), json={"events": [{"key": "k", "type": "message", "text": "hi"}]}, headers=h
        ),
    ),
    Route(
        "POST external checkpoint",
        ("POST", "/api/eval/executions/<execution_id>/checkpoints"),
        "eval:create",
        201,
        external,
        lambda s, t, h: s.client.post(
            executions_path(t, "checkpoints"),
            json={"key": "k", "stage": "stage 0", "verificationQuestion": "Go on?"},
            headers=h,
        ),
    ),
    Route(
        "GET external checkpoint",
        ("GET", "/api/eval/executions/<execution_id>/checkpoints/<checkpoint_id>"),
        "eval:create",
        200,
        external,
        lambda s, t, h: s.client.get(executions_path(t, f"checkpoints/{t.checkpoint_id}"), headers=h),
    ),
    Route(
        "POST external complete",
        ("POST", "/api/eval/executions/<execution_id>/complete"),
        "eval:create",
        200,
        external,
        lambda s, t, h: s.client.post(
            executions_path(t, "complete"), json={"status": "completed", "result": {"output": "done"}}, headers=h
        ),
    ),
    Route(
        "POST decision",
        ("POST", "/api/eval/executions/<execution_id>/checkpoints/<checkpoint_id>/decision"),
        "eval:manage",
        200,
        awaiting,
        lambda s, t, h: s.client.post(
            decision_path(t.execution_id, t.checkpoint_id), json={"decision": "approve"}, headers=h
        ),
    ),
    Route(
        "POST grade",
        ("POST", "/api/eval/executions/<execution_id>/grade"),
        "eval:manage",
        200,
        grading,
        lambda s, t, h: s.client.post(executions_path(t, "grade"), json={"passed": True}, headers=h),
    ),
    Route(
        "POST suites",
        ("POST", "/api/eval/suites"),
        "eval:create",
        201,
        suite,
        lambda s, t, h: s.client.post(
            "/api/eval/suites", json={"name": "Again", "tasks": [task()], "models": ["offline"]}, headers=h
        ),
    ),
    Route(
        "GET suites",
        ("GET", "/api/eval/suites"),
        "eval:read",
        200,
        suite,
        lambda s, t, h: s.client.get("/api/eval/suites", headers=h),
    ),
    Route(
        "GET suite",
        ("GET", "/api/eval/suites/<suite_id>"),
        "eval:read",
        200,
        suite,
        lambda s, t, h: s.client.get(suites_path(t), headers=h),
    ),
    Route(
        "GET suite runs",
        ("GET", "/api/eval/suites/<suite_id>/runs"),
        "eval:read",
        200,
        suite,
        lambda s, t, h: s.client.get(suites_path(t, "runs"), headers=h),
    ),
    Route(
        "GET suite export",
        ("GET", "/api/eval/suites/<suite_id>/export"),
        "eval:read",
        200,
        suite,
        lambda s, t, h: s.client.get(suites_path(t, "export") + "?format=csv", headers=h),
    ),
    Route(
        "POST suite cancel",
        ("POST", "/api/eval/suites/<suite_id>/cancel"),
        "eval:manage",
        200,
        suite,
        lambda s, t, h: s.client.post(suites_path(t, "cancel"), headers=h),
    ),
]

# A key with every scope but the one the route needs (eval:manage implies the other two).
LACKING = {"eval:create": ("eval:read",), "eval:read": ("eval:create",), "eval:manage": ("eval:create", "eval:read")}


@dataclass
class Keys:
    owner: Account
    other: Account
    lacking: dict[str, str]
    revoked: str
    expired: str


async def make_keys(service: Service) -> Keys:
    owner = await account(service, "owner@example.com", "eval:manage")
    other = await account(service, "other@example.com", "eval:manage")
    lacking = {scope: (await add_key(service, owner.email, *scopes))[1] for scope, scopes in LACKING.items()}
    revoked_id, revoked = await add_key(service, owner.email, "eval:manage")
    expired_id, expired = await add_key(service, owner.email, "eval:manage")
    async with service.db.transaction() as session:
        await revoke_api_key(session, revoked_id)
        await session.execute(
            sa.update(ApiKey).where(ApiKey.id == expired_id).values(expires_at=utcnow() - timedelta(seconds=1))
        )
    return Keys(owner, other, lacking, revoked, expired)


# (case, headers for the route, expected status or None for the route's success, expected code)
def cases(keys: Keys, route: Route) -> list[tuple[str, dict[str, str], int | None, str | None]]:
    # Routes that name no execution answer another user's key as they answer the owner's.
    other_status = {
        "POST create-task-agent": 201,
        "GET executions": 200,
        "GET models": 200,
        "POST suites": 201,
        "GET suites": 200,
    }.get(route.name, 404)
    return [
        ("owner key", bearer(keys.owner.key), None, None),
        ("other user's key", bearer(keys.other.key), other_status, "not_found" if other_status == 404 else None),
        ("key without the scope", bearer(keys.lacking[route.scope]), 403, "insufficient_scope"),
        ("revoked key", bearer(keys.revoked), 401, "api_key_revoked"),
        ("expired key", bearer(keys.expired), 401, "api_key_expired"),
        ("malformed header", {"Authorization": f"Token {keys.owner.key}"}, 401, "malformed_authorization"),
        ("no header", {}, 401, "missing_api_key"),
    ]


async def state(service: Service, target: Target) -> tuple[object, ...]:
    """What a request on the target could change: its execution, its suite (cancelled or not) and runs' states."""
    async with service.db.reading() as session:
        suite_status = await session.scalar(sa.select(Suite.cancelled_at).where(Suite.id == target.suite_id))
        runs = await session.execute(
            sa.select(SuiteRun.state, sa.func.count())
            .where(SuiteRun.suite_id == target.suite_id)
            .group_by(SuiteRun.state)
        )
        suites = await session.scalar(sa.select(sa.func.count()).select_from(Suite))
        by_state = sorted((str(state), int(count)) for state, count in runs)
        return (await execution_state(service, target.execution_id), suite_status, by_state, suites)


async def execution_state(service: Service, execution_id: str) -> tuple[str, str | None, int, str | None] | None:
    async with service.db.reading() as session:
        row = (
            await session.execute(
                # The verdict's state too: a grade changes nothing else (the run stays as it ended).
                sa.select(Execution.status, Execution.webhook_url, Execution.verdict_state).where(
                    Execution.id == execution_id
                )
            )
        ).first()
        # Webhook deliveries too: a redelivery changes nothing but their number.
        queued = await session.scalar(
            sa.select(sa.func.count()).select_from(WebhookDelivery).where(WebhookDelivery.execution_id == execution_id)
        )
        return (row[0], row[1], int(queued or 0), row[2]) if row is not None else None


async def test_authorization_matrix(api_only: Service, subtests: pytest.Subtests) -> None:
    keys = await make_keys(api_only)
    for route in ROUTES:
        for case, headers, expected, code in cases(keys, route):
            with subtests.test(msg=f"{route.name} with {case}"):
                target = await route.prepare(api_only, keys.owner)
                before = await state(api_only, target)
                response = await route.call(api_only, target, headers)
                status = expected if expected is not None else route.success
                payload = await response.get_json() if response.status_code != 204 else None
                assert response.status_code == status, payload
                after = await state(api_only, target)
                if status >= 400:
                    title = {401: "Unauthorized", 403: "Access Denied", 404: "Not Found"}[status]
                    assert_problem(response, payload, status, code or "?", title)
                    if status == 401:
                        assert response.headers["WWW-Authenticate"].startswith("Bearer")
                    assert after == before, "a refused request changed nothing"
                elif route.name == "GET executions":
                    ids = {item["executionId"] for item in payload["items"]}
                    assert (target.execution_id in ids) == (case == "owner key")
                elif route.name == "GET suites":
                    ids = {item["suiteId"] for item in payload["suites"]}
                    assert (target.suite_id in ids) == (case == "owner key")
                elif route.name in ("GET suite", "GET suite runs"):
                    assert payload["suiteId"] == target.suite_id
                elif route.name == "GET suite export":
                    assert (await response.get_data(as_text=True)).count("\n") == 3  # the header and two runs
                elif route.name == "GET models":
                    assert payload["otherChoices"][0] == "offline"
                elif route.scope == "eval:manage" and case == "owner key":
                    assert after != before, "the allowed request did its work"


# The API's description takes no key: it describes, it does not act (tests/api/test_openapi.py).
PUBLIC_RULES = {("GET", "/api/openapi.json"), ("GET", "/api/docs")}


def test_matrix_covers_every_api_route(api_only: Service) -> None:
    served = {
        (method, rule.rule)
        for rule in api_only.app.url_map.iter_rules()
        if rule.rule.startswith("/api/")
        for method in rule.methods or ()
        if method not in ("HEAD", "OPTIONS")
    }
    assert served == {route.rule for route in ROUTES} | PUBLIC_RULES, "add the new route to ROUTES"
