"""Bearer API keys and scopes on every endpoint (spec §5, §7)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import Any

import pytest
import sqlalchemy as sa

from core import apikeys
from core.accounts import invalidate_api_keys_after_commit, revoke_api_key
from core.models import ApiKey, utcnow
from tests.api.helpers import (
    CREATE,
    account,
    add_key,
    assert_problem,
    create_ok,
    decision_path,
    status_path,
    task,
)
from tests.conftest import Account, Service, bearer

Call = Callable[[dict[str, str]], Awaitable[Any]]


def endpoints(service: Service, execution_id: str, checkpoint_id: str) -> dict[str, Call]:
    """Each endpoint, called with the given headers and an otherwise valid request."""
    client = service.client

    async def create(headers: dict[str, str]) -> Any:
        return await client.post(CREATE, json=task(), headers=headers)

    async def status(headers: dict[str, str]) -> Any:
        return await client.get(status_path(execution_id), headers=headers)

    async def decision(headers: dict[str, str]) -> Any:
        return await client.post(
            decision_path(execution_id, checkpoint_id), json={"decision": "approve"}, headers=headers
        )

    return {"create": create, "status": status, "decision": decision}


async def queued_execution(service: Service, acct: Account) -> tuple[str, str]:
    """A queued execution (no worker) with one checkpoint the account itself reviews."""
    execution_id = await create_ok(
        service,
        acct.key,
        task(checkpoints=[{"stage": "s", "verificationQuestion": "q?"}], assignedReviewer=acct.email),
    )
    response = await service.client.get(status_path(execution_id), headers=bearer(acct.key))
    record = await response.get_json()
    return execution_id, record["checkpoints"][0]["checkpointId"]


async def assert_unauthorized(response: Any) -> dict[str, Any]:
    payload: dict[str, Any] = await response.get_json()
    assert_problem(response, payload, 401, payload.get("code", "?"), "Unauthorized")
    assert response.headers["WWW-Authenticate"].startswith("Bearer"), response.headers
    return payload


def flip_one_char(key: str) -> str:
    """The same key with one body character changed: well formed, but its checksum no longer fits."""
    i = len(apikeys.PREFIX) + 3
    replacement = "A" if key[i] != "A" else "B"
    return key[:i] + replacement + key[i + 1 :]


BAD_HEADERS: list[tuple[str, Callable[[str], dict[str, str]], str]] = [
    ("missing", lambda key: {}, "missing_api_key"),
    ("empty", lambda key: {"Authorization": ""}, "missing_api_key"),
    ("basic", lambda key: {"Authorization": "Basic dXNlcjpwYXNz"}, "malformed_authorization"),
    ("basic-with-key", lambda key: {"Authorization": f"Basic {key}"}, "malformed_authorization"),
    ("bearer-alone", lambda key: {"Authorization": "Bearer"}, "malformed_authorization"),
    ("bearer-space", lambda key: {"Authorization": "Bearer "}, "malformed_authorization"),
    ("bearer-two-words", lambda key: {"Authorization": "Bearer a b"}, "malformed_authorization"),
    ("bearer-key-and-more", lambda key: {"Authorization": f"Bearer {key} extra"}, "malformed_authorization"),
    ("key-without-scheme", lambda key: {"Authorization": key}, "malformed_authorization"),
    ("bad-checksum", lambda key: bearer(flip_one_char(key)), "invalid_api_key"),
    ("too-short", lambda key: bearer(key[:-1]), "invalid_api_key"),
    ("too-long", lambda key: bearer(key + "A"), "invalid_api_key"),
    ("wrong-prefix", lambda key: bearer("xxx" + key[3:]), "invalid_api_key"),
    ("unknown-well-formed", lambda key: bearer(apikeys.generate_key()), "invalid_api_key"),
]


async def test_unusable_credentials_are_401_on_every_endpoint(api_only: Service, subtests: pytest.Subtests) -> None:
    acct = await account(api_only, "owner@example.com", "eval:manage")
    execution_id, checkpoint_id = await queued_execution(api_only, acct)
    calls = endpoints(api_only, execution_id, checkpoint_id)
    for case, make_headers, code in BAD_HEADERS:
        for name, call in calls.items():
            with subtests.test(msg=f"{case} on {name}"):
                payload = await assert_unauthorized(await call(make_headers(acct.key)))
                assert payload["code"] == code, payload
    # The real key still works: the refusals above were about the credentials, not the requests.
    assert (await calls["status"](bearer(acct.key))).status_code == 200


def test_generated_keys_have_the_documented_format() -> None:
    key = apikeys.generate_key()
    assert len(key) == 41
    assert key.startswith("svc_eval_")
    assert apikeys.is_well_formed(key)
    assert not apikeys.is_well_formed(flip_one_char(key))


async def test_scheme_is_case_insensitive(api_only: Service) -> None:
    acct = await account(api_only, "owner@example.com", "eval:create")
    response = await api_only.client.post(CREATE, json=task(), headers={"Authorization": f"bearer {acct.key}"})
    assert response.status_code == 201, await response.get_json()


async def test_expired_key_is_401(api_only: Service) -> None:
    acct = await account(api_only, "owner@example.com", "eval:manage")
    execution_id, checkpoint_id = await queued_execution(api_only, acct)
    key_id, secret = await add_key(api_only, acct.email, "eval:manage")
    calls = endpoints(api_only, execution_id, checkpoint_id)
    assert (await calls["status"](bearer(secret))).status_code == 200

    async with api_only.db.transaction() as session:
        await session.execute(
            sa.update(ApiKey).where(ApiKey.id == key_id).values(expires_at=utcnow() - timedelta(seconds=1))
        )
        # A writer that changes a key says so, for the web processes' key caches (core/auth_cache.py).
        invalidate_api_keys_after_commit(session, key_ids=[key_id])
    for name, call in calls.items():
        payload = await assert_unauthorized(await call(bearer(secret)))
        assert payload["code"] == "api_key_expired", (name, payload)
    # Only that key: the user's other key is untouched.
    assert (await calls["status"](bearer(acct.key))).status_code == 200


async def test_revoked_key_is_401_on_the_very_next_request(api_only: Service) -> None:
    acct = await account(api_only, "owner@example.com", "eval:manage")
    execution_id, checkpoint_id = await queued_execution(api_only, acct)
    key_id, secret = await add_key(api_only, acct.email, "eval:manage")
    calls = endpoints(api_only, execution_id, checkpoint_id)
    assert (await calls["create"](bearer(secret))).status_code == 201

    async with api_only.db.transaction() as session:
        await revoke_api_key(session, key_id)
    for name, call in calls.items():
        payload = await assert_unauthorized(await call(bearer(secret)))
        assert payload["code"] == "api_key_revoked", (name, payload)
    assert (await calls["status"](bearer(acct.key))).status_code == 200


SCOPE_CASES = [
    # (granted scopes, endpoint, allowed?)
    (("eval:read",), "create", False),
    (("eval:create",), "create", True),
    (("eval:manage",), "create", True),
    (("eval:create",), "status", False),
    (("eval:read",), "status", True),
    (("eval:manage",), "status", True),
    (("eval:create",), "decision", False),
    (("eval:read",), "decision", False),
    (("eval:create", "eval:read"), "decision", False),
    (("eval:manage",), "decision", True),
]


async def test_scopes(api_only: Service, subtests: pytest.Subtests) -> None:
    acct = await account(api_only, "owner@example.com", "eval:manage")
    execution_id, checkpoint_id = await queued_execution(api_only, acct)
    calls = endpoints(api_only, execution_id, checkpoint_id)
    needed = {"create": "eval:create", "status": "eval:read", "decision": "eval:manage"}
    for scopes, endpoint, allowed in SCOPE_CASES:
        with subtests.test(msg=f"{endpoint} with {'+'.join(scopes)}"):
            key_id, secret = await add_key(api_only, acct.email, *scopes)
            response = await calls[endpoint](bearer(secret))
            payload = await response.get_json()
            async with api_only.db.transaction() as session:  # stay under the 10 active keys a user may hold
                await revoke_api_key(session, key_id)
            if not allowed:
                assert_problem(response, payload, 403, "insufficient_scope", "Access Denied")
                assert needed[endpoint] in payload["detail"]
                continue
            # Past authorisation. A queued execution's checkpoint is not awaiting review yet.
            expected = {"create": 201, "status": 200, "decision": 409}[endpoint]
            assert response.status_code == expected, payload
            if endpoint == "decision":
                assert payload["code"] == "checkpoint_not_awaiting_review"


async def test_key_acts_for_its_own_user(api_only: Service) -> None:
    alice = await account(api_only, "alice@example.com", "eval:manage")
    bob = await account(api_only, "bob@example.com", "eval:manage")
    alice_run = await create_ok(api_only, alice.key, task())
    bob_run = await create_ok(api_only, bob.key, task())
    assert (await api_only.client.get(status_path(alice_run), headers=bearer(alice.key))).status_code == 200
    assert (await api_only.client.get(status_path(bob_run), headers=bearer(alice.key))).status_code == 404
    assert (await api_only.client.get(status_path(bob_run), headers=bearer(bob.key))).status_code == 200
