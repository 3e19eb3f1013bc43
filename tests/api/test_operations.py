"""/metrics, /healthz, /readyz and the JSON log lines."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
import sqlalchemy as sa

from core.logs import JsonFormatter, RequestIdFilter
from core.mail import enqueue_mail
from core.models import MailMessage
from core.settings import SettingsError, load_settings
from tests.conftest import Service, bearer
from tests.support.ports import free_port
from tests.support.ratelimits import serving
from tests.support.scripted_run import Script, rejected_then_approved


def sample(text: str, line_start: str) -> float:
    """The value of the one exposition line that starts with `line_start`."""
    found = [line for line in text.splitlines() if line.startswith(line_start + " ")]
    assert len(found) == 1, (line_start, text)
    return float(found[0].rsplit(" ", 1)[1])


async def test_metrics_count_requests_and_read_the_database(api_only: Service) -> None:
    owner = await api_only.account("owner@example.com", "eval:read")
    await rejected_then_approved(owner.user_id).write(api_only.db)
    await Script(owner.user_id, status="queued", completed=None).write(api_only.db)
    await Script(owner.user_id, status="awaiting_review", completed=None).write(api_only.db)
    for _ in range(2):
        assert (await api_only.client.get("/healthz")).status_code == 200
    missing = await api_only.client.get("/api/eval/status/exe_missing", headers=bearer(owner.key))
    assert missing.status_code == 404
    assert (await api_only.client.get("/no/such/page")).status_code == 404

    response = await api_only.client.get("/metrics")
    assert response.status_code == 200
    assert response.headers["Content-Type"].startswith("text/plain; version=")
    text = await response.get_data(as_text=True)
    assert sample(text, 'vouch_http_requests_total{method="GET",route="/healthz",status="200"}') == 2
    # Routes are the URL rules, never the ids in the path.
    assert sample(
        text, 'vouch_http_requests_total{method="GET",route="/api/eval/status/<execution_id>",status="404"}'
    ) == 1
    assert sample(text, 'vouch_http_requests_total{method="GET",route="unmatched",status="404"}') == 1
    assert sample(text, 'vouch_http_request_duration_seconds_count{method="GET",route="/healthz"}') == 2
    assert sample(text, 'vouch_executions{status="completed"}') == 1
    assert sample(text, 'vouch_executions{status="queued"}') == 1
    assert sample(text, 'vouch_executions{status="running"}') == 0
    assert sample(text, "vouch_queue_depth") == 1
    assert sample(text, "vouch_review_waiting") == 1
    # The scripted run's two decided waits: 10 s and 30 s (the automatic pass is no wait).
    assert sample(text, 'vouch_review_wait_seconds_bucket{le="60.0"}') == 2
    assert sample(text, "vouch_review_wait_seconds_count") == 2
    assert sample(text, "vouch_review_wait_seconds_sum") == 40
    assert sample(text, "vouch_socketio_connections") == 0
    assert sample(text, "vouch_database_scrape_ok") == 1


async def test_metrics_token(api_only: Service) -> None:
    token = "metrics-token-0123456789"
    async with serving(api_only.settings.with_changes(metrics_token=token)) as guarded:
        refused = await guarded.client.get("/metrics")
        assert refused.status_code == 401 and refused.headers["WWW-Authenticate"] == "Bearer"
        assert (await guarded.client.get("/metrics", headers=bearer("wrong"))).status_code == 401
        assert (await guarded.client.get("/metrics", headers=bearer(token))).status_code == 200
        # Health checks stay open for load balancers.
        assert (await guarded.client.get("/healthz")).status_code == 200
        assert (await guarded.client.get("/readyz")).status_code == 200


async def test_readyz(api_only: Service) -> None:
    ready = await api_only.client.get("/readyz")
    assert ready.status_code == 200
    assert await ready.get_json() == {"status": "ready", "checks": {"database": "ok"}}


async def test_readyz_503_when_redis_is_unreachable(api_only: Service) -> None:
    unreachable = f"redis://127.0.0.1:{free_port()}/0"
    async with serving(api_only.settings.with_changes(redis_url=unreachable)) as broken:
        answer = await broken.client.get("/readyz")
        assert answer.status_code == 503
        body = await answer.get_json()
        assert body["status"] == "unavailable"
        assert body["checks"]["database"] == "ok"
        assert body["checks"]["redis"].startswith("unavailable: ")
        assert "127.0.0.1" not in json.dumps(body)


@contextmanager
def json_lines(logger_name: str) -> Iterator[io.StringIO]:
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(JsonFormatter())
    handler.addFilter(RequestIdFilter())
    logger = logging.getLogger(logger_name)
    level = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        yield stream
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)


async def test_json_log_lines_carry_request_and_execution_ids(api_only: Service) -> None:
    owner = await api_only.account("owner@example.com", "eval:read")
    execution_id = await rejected_then_approved(owner.user_id).write(api_only.db)
    with json_lines("vouch.http") as stream:
        headers = {**bearer(owner.key), "X-Request-Id": "trace-42"}
        assert (await api_only.client.get(f"/api/eval/status/{execution_id}", headers=headers)).status_code == 200
        assert (await api_only.client.get("/healthz")).status_code == 200
    first, second = (json.loads(line) for line in stream.getvalue().splitlines())
    assert first["requestId"] == "trace-42"
    assert first["executionId"] == execution_id
    assert first["level"] == "INFO" and first["logger"] == "vouch.http"
    assert first["message"].startswith("GET /api/eval/status/<execution_id> 200 ")
    assert first["time"].endswith("Z")
    assert second["requestId"].startswith("req_") and second["executionId"] is None


def test_json_formatter_keeps_exceptions_and_odd_arguments() -> None:
    record = logging.LogRecord("x", logging.ERROR, __file__, 1, "odd %s", (object(),), None)
    try:
        raise ValueError("boom")
    except ValueError:
        import sys

        record.exc_info = sys.exc_info()
    line = json.loads(JsonFormatter().format(record))
    assert line["message"].startswith("odd <object object")
    assert "ValueError: boom" in line["exception"]
    assert line["requestId"] is None and line["executionId"] is None


def test_log_format_setting(tmp_path: object) -> None:
    base = {"VOUCH_DATA_DIR": str(tmp_path), "VOUCH_SECRET_KEY": "k" * 40}
    assert load_settings(base).log_format == "text"
    assert load_settings({**base, "VOUCH_LOG_FORMAT": "JSON"}).log_format == "json"
    assert load_settings({**base, "VOUCH_METRICS_TOKEN": "t"}).metrics_token == "t"
    with pytest.raises(SettingsError, match="VOUCH_LOG_FORMAT"):
        load_settings({**base, "VOUCH_LOG_FORMAT": "xml"})


async def _socket_count(base: str) -> float | None:
    import httpx

    from tests.support.live import HTTP_TIMEOUT

    async with httpx.AsyncClient(timeout=HTTP_TIMEOUT) as client:
        text = (await client.get(f"{base}/metrics")).text
    return sample(text, "vouch_socketio_connections")


async def test_socketio_connections_gauge(api_only: Service) -> None:
    from tests.chat.helpers import Watcher, sign_in
    from tests.support.live import live_server
    from tests.support.waiting import until

    cookie, _ = await sign_in(api_only.db, api_only.settings.secret_key, "watcher@example.com")
    # The live server's own address is its origin: no configured base URL to compare it against.
    with live_server(api_only.settings.with_changes(base_url=None), run_worker=False) as base:
        assert await _socket_count(base) == 0
        watcher = Watcher()
        await watcher.connect(base, cookie=cookie, origin=base)
        try:
            await until(lambda: _only(base, 1))
        finally:
            await watcher.close()
        await until(lambda: _only(base, 0))


async def _only(base: str, wanted: float) -> bool | None:
    return True if await _socket_count(base) == wanted else None


async def test_metrics_count_mail_by_status(api_only: Service) -> None:
    statuses = ["sent", "sent", "failed", "queued", "dev_mailbox"]
    async with api_only.db.transaction() as session:
        for n in range(len(statuses)):
            await enqueue_mail(
                session, message_key=f"metrics:{n}", sender="vouch@example.com", recipient="r@example.com",
                subject="s", text_body="t", smtp_configured=True,
            )
        await session.flush()
        for n, status in enumerate(statuses):
            await session.execute(
                sa.update(MailMessage).where(MailMessage.message_key == f"metrics:{n}").values(status=status)
            )
    text = await (await api_only.client.get("/metrics")).get_data(as_text=True)
    assert sample(text, 'vouch_mail_messages{status="sent"}') == 2
    assert sample(text, 'vouch_mail_messages{status="failed"}') == 1
    assert sample(text, 'vouch_mail_messages{status="queued"}') == 1
    assert sample(text, 'vouch_mail_messages{status="dev_mailbox"}') == 1
