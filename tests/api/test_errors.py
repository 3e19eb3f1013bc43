"""Errors outside the endpoints: unknown paths, wrong methods, big bodies and crashes answer in problem JSON,
and every answer carries a request id."""

from __future__ import annotations

import json
import logging
import re

import pytest
import sqlalchemy as sa

from core.logs import RequestIdFilter
from core.models import Event, utcnow
from core.web.services import db_session
from tests.api.helpers import CREATE, account, assert_problem, status_path, task
from tests.conftest import Service, bearer

UNKNOWN_PATHS = [
    "/api/",
    "/api/nope",
    "/api/eval/status",
    "/api/eval/create-task",
    "/api/eval/executions/x/checkpoints",
]


async def test_unknown_api_path_is_404_problem(api_only: Service, subtests: pytest.Subtests) -> None:
    acct = await account(api_only, "owner@example.com", "eval:manage")
    for path in UNKNOWN_PATHS:
        for headers in ({}, bearer(acct.key)):
            with subtests.test(msg=f"{path} {'with' if headers else 'without'} a key"):
                response = await api_only.client.get(path, headers=headers)
                payload = await response.get_json()
                assert_problem(response, payload, 404, "not_found", "Not Found")


async def test_wrong_method_is_405_problem(api_only: Service) -> None:
    acct = await account(api_only, "owner@example.com", "eval:manage")
    for method, path in (("GET", CREATE), ("DELETE", status_path("exe_x")), ("POST", status_path("exe_x"))):
        response = await api_only.client.open(path, method=method, headers=bearer(acct.key))
        payload = await response.get_json()
        assert_problem(response, payload, 405, "method_not_allowed", "Method Not Allowed")
        assert method in payload["detail"]


async def test_non_api_paths_keep_plain_errors(api_only: Service) -> None:
    response = await api_only.client.get("/no-such-page")
    assert response.status_code == 404
    assert response.mimetype != "application/problem+json"


async def test_health_check(api_only: Service) -> None:
    response = await api_only.client.get("/healthz")
    assert response.status_code == 200
    assert await response.get_json() == {"status": "ok"}


# --- request ids, 413, 500 and 405 details -------------------------------------------------------------------

REQUEST_ID = "X-Request-Id"


async def test_sane_request_id_is_echoed(api_only: Service, subtests: pytest.Subtests) -> None:
    acct = await account(api_only, "owner@example.com", "eval:manage")
    for offered in ("abc", "trace-1.2_3", "A" * 128):
        with subtests.test(msg=offered[:20]):
            response = await api_only.client.post(
                CREATE, json=task(), headers={**bearer(acct.key), REQUEST_ID: offered}
            )
            assert response.status_code == 201
            assert response.headers[REQUEST_ID] == offered


async def test_missing_or_unsafe_request_id_is_replaced(api_only: Service, subtests: pytest.Subtests) -> None:
    acct = await account(api_only, "owner@example.com", "eval:manage")
    seen: set[str] = set()
    for name, offered in (
        ("absent", None),
        ("empty", ""),
        ("too long", "A" * 129),
        ("spaces", "a b"),
        ("log forging", "x\\nINFO forged"),
        ("non-ascii", "idé"),
        ("slash", "a/b"),
    ):
        with subtests.test(msg=name):
            headers = bearer(acct.key) if offered is None else {**bearer(acct.key), REQUEST_ID: offered}
            response = await api_only.client.get("/api/eval/executions", headers=headers)
            assert response.status_code == 200
            generated = response.headers[REQUEST_ID]
            assert generated != offered and re.fullmatch(r"[A-Za-z0-9._-]{1,128}", generated), generated
            seen.add(generated)
    assert len(seen) == 7, "each request gets an id of its own"


ERROR_REQUESTS = [
    ("401", "GET", status_path("exe_x"), False),
    ("403", "POST", CREATE, True),
    ("404 unknown id", "GET", status_path("exe_x"), True),
    ("404 unknown path", "GET", "/api/nope", True),
    ("405", "PUT", CREATE, True),
    ("422", "GET", "/api/eval/executions?limit=0", True),
]


async def test_errors_carry_the_request_id(api_only: Service, subtests: pytest.Subtests) -> None:
    reader = await account(api_only, "reader@example.com", "eval:read")
    for name, method, path, with_key in ERROR_REQUESTS:
        with subtests.test(msg=name):
            headers = {REQUEST_ID: f"req-{name.replace(' ', '-')}"}
            if with_key:
                headers.update(bearer(reader.key))
            response = await api_only.client.open(path, method=method, headers=headers)
            assert response.status_code == int(name[:3])
            assert response.mimetype == "application/problem+json"
            assert response.headers[REQUEST_ID] == headers[REQUEST_ID]


async def test_wrong_method_names_the_allowed_ones(api_only: Service, subtests: pytest.Subtests) -> None:
    acct = await account(api_only, "owner@example.com", "eval:manage")
    cases = [
        ("GET", CREATE, {"POST"}),
        ("PUT", status_path("exe_x"), {"GET"}),
        ("GET", "/api/eval/executions/exe_x", {"PATCH", "DELETE"}),
        ("GET", "/api/eval/executions/exe_x/cancel", {"POST"}),
        ("DELETE", "/api/eval/executions", {"GET"}),
    ]
    for method, path, allowed in cases:
        with subtests.test(msg=f"{method} {path}"):
            response = await api_only.client.open(path, method=method, headers=bearer(acct.key))
            assert_problem(response, await response.get_json(), 405, "method_not_allowed", "Method Not Allowed")
            listed = {m.strip() for m in response.headers["Allow"].split(",")}
            assert allowed <= listed and method not in listed, listed


async def test_body_over_one_mebibyte_is_413(api_only: Service, subtests: pytest.Subtests) -> None:
    acct = await account(api_only, "owner@example.com", "eval:manage")
    limit = 1024 * 1024
    fits = task(taskDescription="x" * 1000)
    padding = limit - len(json.dumps(fits).encode())
    at_limit = json.dumps(task(taskDescription="x" * (1000 + padding)))
    assert len(at_limit.encode()) == limit
    over = at_limit[:-2] + 'x"}'
    cases = [
        # A declared length is refused before anything else, even authentication.
        ("declared length, no key", over, {"Content-Length": str(len(over.encode()))}),
        # Without one (chunked), the body is cut off at the limit while it is read.
        ("undeclared length, with a key", over, bearer(acct.key)),
    ]
    for name, body, headers in cases:
        with subtests.test(msg=name):
            response = await api_only.client.post(
                CREATE, data=body, headers={**headers, "Content-Type": "application/json"}
            )
            assert_problem(response, await response.get_json(), 413, "content_too_large", "Content Too Large")
            assert REQUEST_ID in response.headers
    # Exactly 1 MiB is allowed (it fails validation on length, which proves it was read).
    response = await api_only.client.post(
        CREATE, data=at_limit, headers={**bearer(acct.key), "Content-Type": "application/json"}
    )
    assert response.status_code == 422, await response.get_json()


SECRET_DETAIL = "password=hunter2 at /srv/vouch/internal.py"


async def test_unhandled_error_is_problem_json_without_internals(
    api_only: Service, caplog: pytest.LogCaptureFixture
) -> None:
    async def boom() -> dict[str, str]:
        raise RuntimeError(SECRET_DETAIL)

    api_only.app.add_url_rule("/api/test-boom", "test_boom", boom)
    caplog.handler.addFilter(RequestIdFilter())
    response = await api_only.client.get("/api/test-boom", headers={REQUEST_ID: "boom-1"})
    payload = await response.get_json()
    assert_problem(response, payload, 500, "internal_error", "Internal Server Error")
    assert response.headers[REQUEST_ID] == "boom-1"
    assert "boom-1" in payload["detail"]
    assert SECRET_DETAIL not in json.dumps(payload) and "RuntimeError" not in json.dumps(payload)
    logged = [r for r in caplog.records if r.exc_info and SECRET_DETAIL in str(r.exc_info[1])]
    assert logged, "the exception is logged for the operator"
    assert all(getattr(r, "request_id", None) == "boom-1" for r in logged)


async def test_failing_commit_is_problem_json(api_only: Service) -> None:
    """The request's one commit runs after the view: its failure must still answer in problem JSON."""

    async def orphan_event() -> dict[str, bool]:
        db_session().add(Event(execution_id="exe_missing", seq=1, type="x", payload={}, created_at=utcnow()))
        return {"success": True}

    api_only.app.add_url_rule("/api/test-orphan", "test_orphan", orphan_event, methods=["POST"])
    response = await api_only.client.post("/api/test-orphan", headers={REQUEST_ID: "orphan-1"})
    payload = await response.get_json()
    assert_problem(response, payload, 500, "internal_error")
    assert response.headers[REQUEST_ID] == "orphan-1"
    async with api_only.db.reading() as session:
        assert await session.scalar(sa.select(sa.func.count()).select_from(Event)) == 0


async def test_log_lines_outside_requests_read_dash(caplog: pytest.LogCaptureFixture) -> None:
    caplog.handler.addFilter(RequestIdFilter())
    with caplog.at_level(logging.INFO):
        logging.getLogger("vouch.test").info("no request here")
    assert [getattr(r, "request_id", None) for r in caplog.records] == ["-"]
