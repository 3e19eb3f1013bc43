"""Retries: a 429 waits Retry-After; a create whose answer was lost is sent again and creates one execution."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from vouch_client import Client, RateLimited, RetryPolicy, TransportError

from core.settings import Settings
from tests.client.conftest import OWNER, Vouch, accounts, plain_task, reviewed_task
from tests.client.proxy import Proxy
from tests.support.live import live_server


@pytest.fixture
def limited(client_settings: Settings) -> Iterator[Vouch]:
    """A server that admits 2 requests per key, then one every 2 seconds (Retry-After: 2)."""
    settings = client_settings.with_changes(rate_limit=2, rate_limit_window_seconds=4)
    owner = accounts(settings, (OWNER, ("eval:manage",)))[0]
    with live_server(settings, run_worker=False) as base:
        yield Vouch(base, settings, owner)


def test_429_is_retried_after_retry_after(limited: Vouch) -> None:
    with Client(limited.base, limited.owner.key) as client:
        created = client.create_task(plain_task())
        client.status(created.executionId)  # the burst is spent
        began = time.monotonic()
        status = client.status(created.executionId)  # refused once with Retry-After: 2, then admitted
        waited = time.monotonic() - began
        assert status.executionId == created.executionId
        assert waited >= 1.9, f"retried after {waited:.2f} s, before Retry-After"

    # The key's budget is spent again: without retries the 429 comes out, its Retry-After attached.
    with Client(limited.base, limited.owner.key, retry=RetryPolicy(max_retries=0)) as impatient:
        with pytest.raises(RateLimited) as refused:
            impatient.status(created.executionId)
    assert refused.value.code == "rate_limit_exceeded" and refused.value.retry_after in (1, 2)


def test_a_retry_after_longer_than_allowed_is_not_waited_for(limited: Vouch) -> None:
    with Client(limited.base, limited.owner.key, retry=RetryPolicy(max_retry_wait=0.5)) as client:
        client.list_executions()
        client.list_executions()
        began = time.monotonic()
        with pytest.raises(RateLimited):
            client.list_executions()
        assert time.monotonic() - began < 1.5


def test_create_retried_after_a_dropped_connection_creates_one_execution(vouch: Vouch) -> None:
    with Proxy(vouch.base, drop_creates=1).running() as proxy, Client(proxy.base, vouch.owner.key) as client:
        created = client.create_task(reviewed_task())
        assert proxy.dropped == 1, "the first answer should have been lost"
        assert created.replayed, "the retry should have been answered from the Idempotency-Key record"
        listed = client.list_executions()
        assert [item.executionId for item in listed.items] == [created.executionId]


def test_an_unreachable_server_is_retried_then_reported(vouch: Vouch) -> None:
    with Client("http://127.0.0.1:9", vouch.owner.key, retry=RetryPolicy(backoff=0.01)) as nowhere:
        with pytest.raises(TransportError):
            nowhere.status("exe_x")  # connect errors are retried (nothing was sent), then reported
    with Client("http://127.0.0.1:9", vouch.owner.key, retry=RetryPolicy(backoff=0.01)) as nowhere:
        with pytest.raises(TransportError):
            nowhere.decide("exe_x", "chk_x", "approve")
