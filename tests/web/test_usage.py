"""Key usage: counted per request in memory, written in batches, shown on the keys page."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from typing import Any

import sqlalchemy as sa
from sqlalchemy import event

from api.app import create_app
from api.usage import UsageRecorder, day_of
from core.accounts import create_api_key, create_user
from core.bus import InProcessBus
from core.db import Database
from core.models import ApiKey, ApiKeyUsage, utcnow
from core.settings import Settings
from tests.conftest import bearer
from tests.web.conftest import Site
from tests.web.test_key_pages import create_key, secret_of

WRITES = re.compile(r"^\s*(UPDATE api_keys|INSERT INTO api_key_usage)\b", re.IGNORECASE)


@contextmanager
def writes_to_usage(db: Database) -> Iterator[list[tuple[str, Any]]]:
    """Every statement that writes usage (the api_keys counters, the per-day rows), as the driver got it."""
    seen: list[tuple[str, Any]] = []

    def listen(_conn: Any, _cursor: Any, statement: str, parameters: Any, _context: Any, many: bool) -> None:
        if WRITES.match(statement):
            seen.append((statement.split()[0].upper(), parameters if many else [parameters]))

    event.listen(db.engine.sync_engine, "before_cursor_execute", listen)
    try:
        yield seen
    finally:
        event.remove(db.engine.sync_engine, "before_cursor_execute", listen)


async def call_api(site: Site, secret: str, addr: str) -> int:
    response = await site.app.test_client().get(
        "/api/eval/status/exe_nothing", headers=bearer(secret), scope_base={"client": (addr, 40000)}
    )
    return response.status_code


async def test_usage_and_last_use_show_after_a_flush(site: Site) -> None:
    browser, _ = await site.signed_in("uma@example.com")
    secret = secret_of(await create_key(browser, name="counted"))
    before = await browser.get("/keys")
    assert "Never" in before.text and '<span class="key-total">0</span>' in before.text
    for addr in ["203.0.113.50"] * 3 + ["203.0.113.51"] * 2:
        assert await call_api(site, secret, addr) == 404  # authenticated, then no such execution
    # Nothing is written per request: the page still shows the old numbers until the batch is flushed.
    assert '<span class="key-total">0</span>' in (await browser.get("/keys")).text
    assert await site.services.usage.flush() == 1
    after = (await browser.get("/keys")).text
    assert '<span class="key-total">5</span> in all' in after
    assert '<span class="key-30d">5</span> in the last 30 days' in after
    assert '<code class="key-last-ip">203.0.113.51</code>' in after
    used = re.search(r'class="key-last-used"><time datetime="([^"]+)">', after)
    assert used, after
    async with site.db.reading() as session:
        key = await session.scalar(sa.select(ApiKey).where(ApiKey.name == "counted"))
    assert key is not None and key.last_used_at is not None
    assert used.group(1) == key.last_used_at.isoformat(timespec="seconds")
    assert abs(utcnow() - key.last_used_at) < timedelta(minutes=1)
    assert f'<tr><td>{day_of(utcnow())}</td><td class="num">5</td></tr>' in after
    assert after.count("<rect ") == 30


async def test_requests_cost_no_usage_writes_and_a_flush_one_per_key(site: Site) -> None:
    browser, _ = await site.signed_in("uma@example.com")
    secrets = [secret_of(await create_key(browser, name=f"k{n}")) for n in range(2)]
    with writes_to_usage(site.db) as during_requests:
        for _ in range(6):
            for secret in secrets:
                assert await call_api(site, secret, "203.0.113.60") == 404
    assert during_requests == []
    with writes_to_usage(site.db) as during_flush:
        assert await site.services.usage.flush() == 2
    # One statement per table for the whole batch, and each key in it once (one day, so one usage row each).
    assert [verb for verb, _ in during_flush] == ["UPDATE", "INSERT"]
    for _, parameter_sets in during_flush:
        assert len(parameter_sets) == 2
    with writes_to_usage(site.db) as idle_flush:
        assert await site.services.usage.flush() == 0
    assert idle_flush == []
    async with site.db.reading() as session:
        counts = {name: n for name, n in await session.execute(sa.select(ApiKey.name, ApiKey.use_count))}
        daily = list(await session.scalars(sa.select(ApiKeyUsage.count)))
    assert counts == {"k0": 6, "k1": 6} and daily == [6, 6]


async def test_flushes_add_up_across_days_and_never_move_last_use_back(site: Site) -> None:
    async with site.db.transaction() as session:
        user = await create_user(session, "vic@example.com")
        made = await create_api_key(session, user, name="k", scopes=["eval:read"], secret_key=site.settings.secret_key)
    key_id = made.record.id
    recorder = UsageRecorder(site.db, interval=3600)
    now = utcnow()
    yesterday = now - timedelta(days=1)
    recorder.record(key_id, "192.0.2.1", yesterday)
    recorder.record(key_id, "192.0.2.2", now)
    recorder.record(key_id, "192.0.2.3", now - timedelta(seconds=5))
    await recorder.flush()
    # A process flushing older uses later adds its counts but keeps the newest last use.
    recorder.record(key_id, "192.0.2.9", now - timedelta(hours=1))
    await recorder.flush()
    async with site.db.reading() as session:
        key = await session.get_one(ApiKey, key_id)
        rows = {day: n for day, n in await session.execute(sa.select(ApiKeyUsage.day, ApiKeyUsage.count))}
    assert key.use_count == 4 and key.last_used_ip == "192.0.2.2" and key.last_used_at == now
    # Counted on each use's own day (an hour ago is yesterday just after midnight).
    used_at = [yesterday, now, now - timedelta(seconds=5), now - timedelta(hours=1)]
    assert rows == Counter(day_of(moment) for moment in used_at)


async def test_counts_survive_a_failed_flush(site: Site) -> None:
    class Broken:
        dialect = site.db.dialect

        def transaction(self) -> Any:
            raise ConnectionError("database away")

    recorder = UsageRecorder(Broken(), interval=3600)  # type: ignore[arg-type]
    recorder.record("key_x", "192.0.2.1", utcnow())
    recorder.record("key_x", "192.0.2.1", utcnow())
    try:
        await recorder.flush()
    except ConnectionError:
        pass
    else:
        raise AssertionError("flush should have failed")
    assert recorder.pending == 2


async def test_usage_is_flushed_when_the_app_stops(settings: Settings) -> None:
    app = create_app(settings, run_worker=False)
    async with app.test_app():
        db = app.extensions["vouch"].db
        async with db.transaction() as session:
            user = await create_user(session, "wes@example.com")
            made = await create_api_key(session, user, name="k", scopes=["eval:read"], secret_key=settings.secret_key)
        for _ in range(3):
            response = await app.test_client().get("/api/eval/status/exe_nothing", headers=bearer(made.secret))
            assert response.status_code == 404
    reader = Database(settings.database_url, InProcessBus())
    try:
        async with reader.reading() as session:
            assert (await session.get_one(ApiKey, made.record.id)).use_count == 3
    finally:
        await reader.dispose()
