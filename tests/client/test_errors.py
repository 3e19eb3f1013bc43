"""Error answers become the exception of their kind, carrying the problem details."""

from __future__ import annotations

import pytest
from vouch_client import (
    ApiError,
    BadRequest,
    Client,
    NotFound,
    PermissionDenied,
    Unauthorized,
    ValidationFailed,
    VouchError,
)

from tests.client.conftest import Vouch, plain_task, reviewed_task

BAD_KEY = "svc_eval_" + "A" * 32


def test_each_error_class_carries_its_problem(vouch: Vouch) -> None:
    reader = vouch.account("reader@example.com", "eval:read")
    with Client(vouch.base, vouch.owner.key) as client:
        with pytest.raises(NotFound) as missing:
            client.status("exe_doesnotexist")
        problem = missing.value.problem
        assert (problem.status, problem.code, problem.title) == (404, "not_found", "Not Found")
        assert problem.type.endswith("/not_found") and missing.value.request_id

        with pytest.raises(ValidationFailed) as invalid:
            client.create_task(reviewed_task(reviewer=None))
        assert invalid.value.status == 422 and invalid.value.code == "validation_failed"
        assert [e.pointer for e in invalid.value.errors] == ["/assignedReviewer"]

        with pytest.raises(ValidationFailed) as parameter:
            client.list_executions(status="sleeping")
        assert parameter.value.errors[0].parameter == "status"

        with pytest.raises(BadRequest) as cursor:
            client.list_executions(cursor="not-ours")
        assert cursor.value.code == "invalid_cursor"

    with Client(vouch.base, BAD_KEY) as stranger, pytest.raises(Unauthorized) as unknown:
        stranger.status("exe_x")
    assert unknown.value.code == "invalid_api_key" and unknown.value.headers["WWW-Authenticate"].startswith("Bearer")

    with Client(vouch.base, reader.key) as read_only, pytest.raises(PermissionDenied) as scope:
        read_only.create_task(plain_task())
    assert scope.value.code == "insufficient_scope"
    assert isinstance(scope.value, ApiError) and isinstance(scope.value, VouchError)


def test_another_users_execution_is_not_found(vouch: Vouch) -> None:
    other = vouch.account("other@example.com", "eval:manage")
    with Client(vouch.base, vouch.owner.key) as owner, Client(vouch.base, other.key) as stranger:
        created = owner.create_task(plain_task())
        with pytest.raises(NotFound):
            stranger.status(created.executionId)
        with pytest.raises(NotFound):
            stranger.cancel(created.executionId)


def test_missing_configuration_is_an_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("VOUCH_URL", raising=False)
    monkeypatch.delenv("VOUCH_API_KEY", raising=False)
    with pytest.raises(VouchError, match="VOUCH_URL"):
        Client()
    monkeypatch.setenv("VOUCH_URL", "http://127.0.0.1:1")
    with pytest.raises(VouchError, match="VOUCH_API_KEY"):
        Client()
