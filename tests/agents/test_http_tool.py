"""The agent's http_request tool and its own allow-list (VOUCH_AGENT_HTTP_ALLOWLIST), apart from the webhooks'
(VOUCH_WEBHOOK_ALLOWLIST): entries with ports, and the service's own address that no entry opens."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from agents.http_tool import HttpRequest
from agents.tool_base import ToolFailed
from core.db import Database
from core.models import utcnow
from core.settings import Settings, load_settings
from core.webhook_sender import deliver_due_webhooks
from tests.conftest import make_account
from tests.core.webhook_support import attempts, deliveries, finish, new_execution
from tests.support.hello_server import hello_server, port_of
from tests.support.webhook_receiver import webhook_receiver


def env_settings(tmp_path: Path, **env: str) -> Settings:
    """Settings as `vouch` reads them from its environment."""
    return load_settings({"VOUCH_DATA_DIR": str(tmp_path / "data"), "VOUCH_SECRET_KEY": "k" * 40, **env})


async def get(settings: Settings, url: str) -> dict[str, Any]:
    answer: dict[str, Any] = await HttpRequest().perform(settings, {"method": "GET", "url": url}, utcnow())
    return answer


async def test_an_entry_with_a_port_opens_that_port_only(tmp_path: Path) -> None:
    async with hello_server() as allowed, hello_server() as other:
        settings = env_settings(tmp_path, VOUCH_AGENT_HTTP_ALLOWLIST=f"127.0.0.1:{port_of(allowed)}")
        answer = await get(settings, allowed + "/")
        assert (answer["status"], answer["body"]) == (200, "hello")
        with pytest.raises(ToolFailed, match="refused") as refused:
            await get(settings, other + "/")  # the same address, another port: another service
        assert f"port {port_of(other)}" in str(refused.value)
        assert "VOUCH_AGENT_HTTP_ALLOWLIST" in str(refused.value)
        with pytest.raises(ToolFailed, match="refused"):
            await get(settings, "http://127.0.0.1:5432/")  # PostgreSQL's port, say


async def test_the_services_own_listen_address_is_refused_even_when_allow_listed(tmp_path: Path) -> None:
    async with hello_server() as own, hello_server() as other:
        port = port_of(own)
        settings = env_settings(tmp_path, VOUCH_AGENT_HTTP_ALLOWLIST="127.0.0.0/8").with_changes(
            listen_address=("127.0.0.1", port)
        )
        assert (await get(settings, other + "/"))["status"] == 200  # the allow-list works otherwise
        for url in (own + "/metrics", f"http://localhost:{port}/metrics", f"http://[::ffff:127.0.0.1]:{port}/"):
            with pytest.raises(ToolFailed, match="the service's own") as refused:
                await get(settings, url)
            assert "VOUCH_AGENT_HTTP_ALLOWLIST" not in str(refused.value)  # no entry opens it: none is suggested
        # Listening on every address: each of this host's own addresses, on that port, is the service.
        everywhere = settings.with_changes(listen_address=("0.0.0.0", port))
        for url in (own + "/", f"http://0.0.0.0:{port}/", f"http://127.0.0.2:{port}/"):
            with pytest.raises(ToolFailed, match="the service's own"):
                await get(everywhere, url)
        assert (await get(everywhere, other + "/"))["status"] == 200


async def test_the_base_url_host_and_port_are_refused_even_when_allow_listed(tmp_path: Path) -> None:
    async with hello_server() as own, hello_server() as other:
        settings = env_settings(
            tmp_path, VOUCH_AGENT_HTTP_ALLOWLIST="127.0.0.1", VOUCH_BASE_URL=f"http://localhost:{port_of(own)}"
        )
        with pytest.raises(ToolFailed, match="the service's own"):
            await get(settings, own + "/healthz")
        assert (await get(settings, other + "/"))["status"] == 200


@pytest.mark.parametrize("variable", ["VOUCH_WEBHOOK_ALLOWLIST", "VOUCH_OUTBOUND_ALLOWLIST"])
async def test_the_webhook_allow_list_reaches_webhooks_and_not_the_agent_tool(
    db: Database, settings: Settings, variable: str
) -> None:
    owner = await make_account(db, settings, "owner@example.com")
    async with webhook_receiver([]) as hooks:
        configured = env_settings(
            settings.data_dir, VOUCH_DATABASE_URL=settings.database_url, **{variable: f"127.0.0.1:{port_of(hooks.url)}"}
        )
        execution_id = await new_execution(db, owner, hooks.url)
        await finish(db, execution_id)
        assert await deliver_due_webhooks(db, configured) == 1
        [delivery] = await deliveries(db, execution_id)
        [attempt] = await attempts(db, delivery.id)
        assert (delivery.status, attempt.status_code) == ("succeeded", 200), attempt.error
        assert len(hooks.received) == 1
        with pytest.raises(ToolFailed, match=r"refused.*loopback.*VOUCH_AGENT_HTTP_ALLOWLIST"):
            await HttpRequest().perform(
                configured, {"method": "POST", "url": hooks.url, "body": "{}"}, utcnow()
            )  # the agent tool has no list of its own here
    assert len(hooks.received) == 1
