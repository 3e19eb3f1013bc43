"""The client's HTTP calls against a scripted server: headers, query strings, retries and error answers."""

from __future__ import annotations

import time

import pytest
from stub_http import Reply, Stub, problem, status_record
from vouch_client import (
    AsyncClient,
    Client,
    NotFound,
    RateLimited,
    RetryPolicy,
    ServerError,
    TransportError,
    VouchError,
)

KEY = "svc_eval_" + "k" * 32
FAST = RetryPolicy(backoff=0.01, max_backoff=0.05)


def test_a_call_carries_the_key_and_reads_its_answer(stub: Stub) -> None:
    stub.on("GET", "/api/eval/status/exe_1", Reply(200, status_record()))
    with Client(stub.base, KEY) as client:
        record = client.status("exe_1")
    assert record.status == "completed"
    [seen] = stub.seen
    assert seen.headers["Authorization"] == f"Bearer {KEY}" and seen.headers["User-Agent"].startswith("vouch-python")


def test_an_id_stays_one_path_segment(stub: Stub) -> None:
    with Client(stub.base, KEY) as client, pytest.raises(NotFound):
        client.status("a/../b")
    assert stub.seen[0].path == "/api/eval/status/a%2F..%2Fb"


async def test_the_async_client_lists_with_the_query_the_api_reads(stub: Stub) -> None:
    stub.on("GET", "/api/eval/executions", Reply(200, {"success": True, "items": [], "nextCursor": None}))
    async with AsyncClient(stub.base, KEY) as client:
        page = await client.list_executions(status=["running", "queued"], limit=5, cursor="c1")
    assert page.items == [] and stub.seen[0].query == "status=running%2Cqueued&limit=5&cursor=c1"


def test_a_create_sends_one_idempotency_key_on_every_retry(stub: Stub) -> None:
    created = {"success": True, "executionId": "exe_9", "chatUrl": "http://vouch.example/chat/exe_9"}
    stub.on("POST", "/api/eval/create-task-agent", Reply(503, "<html>busy</html>"), Reply(201, created))
    with Client(stub.base, KEY, retry=FAST) as client:
        answer = client.create_task({"taskName": "x", "taskDescription": "y"})
    assert answer.executionId == "exe_9" and answer.replayed is False
    first, second = stub.seen
    assert first.headers["Idempotency-Key"] == second.headers["Idempotency-Key"]
    assert first.headers["Idempotency-Key"].startswith("vouch-py-") and first.body == {
        "taskName": "x",
        "taskDescription": "y",
    }


def test_429_waits_retry_after_and_then_gives_up(stub: Stub) -> None:
    limited = problem(429, "rate_limit_exceeded", "slow down")
    stub.on(
        "GET", "/api/eval/status/exe_1", Reply(429, limited.body, {"Retry-After": "1"}), Reply(200, status_record())
    )
    with Client(stub.base, KEY) as client:
        began = time.monotonic()
        assert client.status("exe_1").status == "completed"
        assert time.monotonic() - began >= 0.9
    stub.on("GET", "/api/eval/status/exe_1", Reply(429, limited.body, {"Retry-After": "1"}))
    with Client(stub.base, KEY, retry=RetryPolicy(max_retries=0)) as client, pytest.raises(RateLimited) as refused:
        client.status("exe_1")
    assert refused.value.code == "rate_limit_exceeded" and refused.value.retry_after == 1


def test_a_proxy_page_instead_of_problem_details_still_gives_a_useful_error(stub: Stub) -> None:
    # A cancel is not repeated on a 502 (it is not idempotent): the gateway's page comes out as the error.
    stub.on("POST", "/api/eval/executions/exe_1/cancel", Reply(502, "Bad Gateway from the balancer\n<p>…</p>"))
    with Client(stub.base, KEY, retry=FAST) as client, pytest.raises(ServerError) as failed:
        client.cancel("exe_1")
    assert (failed.value.status, failed.value.code) == (502, "http_502")
    assert failed.value.detail == "Bad Gateway from the balancer" and len(stub.seen) == 1


def test_no_server_or_no_key_is_said_before_any_call(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("VOUCH_URL", raising=False)
    monkeypatch.delenv("VOUCH_API_KEY", raising=False)
    with pytest.raises(VouchError, match="no server address"):
        Client(api_key=KEY)
    with pytest.raises(VouchError, match="no API key"):
        Client("http://127.0.0.1:9")


def test_an_unreachable_server_is_a_transport_error() -> None:
    with Client("http://127.0.0.1:9", KEY, retry=FAST) as client, pytest.raises(TransportError):
        client.status("exe_1")
