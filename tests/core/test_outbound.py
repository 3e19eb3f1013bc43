"""The outbound guard: private, loopback, link-local … targets refused at connect time unless allow-listed."""

from __future__ import annotations

import socket
from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiohttp import web

from core import outbound
from core.allowlist import parse_allowlist
from core.outbound import OutboundPolicy, OutboundRefused, check_address, check_url, guarded_client
from tests.support.hello_server import hello_server, port_of


def make_policy(*allow: str) -> OutboundPolicy:
    return OutboundPolicy(parse_allowlist(",".join(allow)), "VOUCH_AGENT_HTTP_ALLOWLIST")


@pytest.fixture
async def local_server() -> AsyncIterator[str]:
    """A real HTTP server on 127.0.0.1:<free port>: / answers "hello", /jump redirects to / (or to ?to=)."""

    async def hello(_request: web.Request) -> web.Response:
        return web.Response(text="hello")

    async def jump(request: web.Request) -> web.Response:
        raise web.HTTPFound(request.query.get("to", "/"))

    app = web.Application()
    app.router.add_get("/", hello)
    app.router.add_get("/jump", jump)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        await runner.cleanup()


@pytest.mark.parametrize(
    ("address", "reason"),
    [
        ("127.0.0.1", "loopback"),
        ("169.254.169.254", "link-local"),
        ("10.1.2.3", "private"),
        ("192.168.0.10", "private"),
        ("172.16.5.4", "private"),
        ("100.64.0.1", "not globally routable"),
        ("0.0.0.0", "unspecified"),
        ("224.0.0.1", "multicast"),
        ("::1", "loopback"),
        ("fe80::1", "link-local"),
        ("fc00::1", "private"),
        ("::ffff:127.0.0.1", "loopback"),
        ("::ffff:169.254.169.254", "link-local"),
        ("::", "unspecified"),
    ],
)
def test_non_public_addresses_are_refused_with_the_reason(address: str, reason: str) -> None:
    with pytest.raises(OutboundRefused) as refused:
        check_address(make_policy(), "target", address, 80)
    assert reason in str(refused.value)
    assert "VOUCH_AGENT_HTTP_ALLOWLIST" in str(refused.value)
    assert refused.value.address == address


@pytest.mark.parametrize("address", ["93.184.216.34", "2606:4700:4700::1111", "8.8.8.8"])
def test_public_addresses_pass(address: str) -> None:
    check_address(make_policy(), "target", address, 80)


def test_the_allow_list_admits_its_networks_only() -> None:
    policy = make_policy("10.0.0.0/8", "127.0.0.1/32")
    check_address(policy, "t", "10.9.9.9", 80)
    check_address(policy, "t", "127.0.0.1", 5432)
    check_address(policy, "t", "::ffff:127.0.0.1", 80)  # the same host, written as IPv6
    with pytest.raises(OutboundRefused):
        check_address(policy, "t", "127.0.0.2", 80)
    with pytest.raises(OutboundRefused):
        check_address(policy, "t", "192.168.1.1", 80)


def test_an_entry_with_a_port_admits_that_port_only() -> None:
    policy = make_policy("127.0.0.1:9000", "10.0.0.0/8:443", "[::1]:8080")
    check_address(policy, "t", "127.0.0.1", 9000)
    check_address(policy, "t", "::ffff:127.0.0.1", 9000)
    check_address(policy, "t", "10.2.3.4", 443)
    check_address(policy, "t", "::1", 8080)
    for address, port, allowed in (("127.0.0.1", 5432, 9000), ("10.2.3.4", 80, 443), ("::1", 9000, 8080)):
        with pytest.raises(OutboundRefused, match=f"port {port}: .*allows it on port {allowed} only"):
            check_address(policy, "t", address, port)


@pytest.mark.parametrize(
    "url",
    ["http://127.0.0.1/", "http://169.254.169.254/latest/meta-data/", "http://10.0.0.1:8080/", "http://192.168.1.1/",
     "http://[::1]/", "http://localhost/", "ftp://example.com/", "http:///nohost"],
)  # fmt: skip
async def test_check_url_refuses_early(url: str) -> None:
    with pytest.raises(OutboundRefused):
        await check_url(make_policy(), url)


async def test_a_loopback_server_is_refused_at_connect_time(local_server: str) -> None:
    async with guarded_client(make_policy(), timeout=5) as client:
        with pytest.raises(OutboundRefused, match="loopback"):
            await client.get(local_server)
        port = local_server.rsplit(":", 1)[1]
        with pytest.raises(OutboundRefused, match="loopback"):  # a name resolving to loopback
            await client.get(f"http://localhost:{port}/")


async def test_the_check_is_on_the_resolved_address_of_every_connection(monkeypatch: pytest.MonkeyPatch) -> None:
    """A name that resolves to a private address when the connection is made is refused then, whatever it
    resolved to before (DNS rebinding)."""
    answers = iter(["93.184.216.34", "10.0.0.7"])

    async def rebinding(host: str, port: int, **_: Any) -> list[Any]:
        return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", (next(answers), port))]

    monkeypatch.setattr(outbound.anyio, "getaddrinfo", rebinding)
    policy = make_policy()
    await check_url(policy, "http://rebind.example/")  # first answer: public
    async with guarded_client(policy, timeout=5) as client:
        with pytest.raises(OutboundRefused, match=r"rebind\.example \(10\.0\.0\.7\)"):
            await client.get("http://rebind.example/")


async def test_an_allow_listed_server_is_reached_and_redirects_are_not_followed(local_server: str) -> None:
    policy = make_policy("127.0.0.1/32")
    await check_url(policy, local_server)
    async with guarded_client(policy, timeout=5) as client:
        answer = await client.get(local_server)
        assert (answer.status_code, answer.text) == (200, "hello")
        jumped = await client.get(f"{local_server}/jump")
        assert jumped.status_code == 302  # not followed
        assert jumped.headers["Location"] == "/"
    async with guarded_client(policy, timeout=5, follow_redirects=True) as client:
        assert (await client.get(f"{local_server}/jump")).text == "hello"


async def test_a_followed_redirect_is_checked_at_its_own_hop(local_server: str) -> None:
    """Allow-listed on one port: a redirect from there to another port of the same host is refused."""
    port = local_server.rsplit(":", 1)[1]
    policy = make_policy(f"127.0.0.1:{port}")
    async with hello_server() as other, guarded_client(policy, timeout=5, follow_redirects=True) as client:
        assert (await client.get(f"{local_server}/jump")).text == "hello"
        with pytest.raises(OutboundRefused, match=f"port {port_of(other)}: .*allows it on port {port} only"):
            await client.get(f"{local_server}/jump", params={"to": f"{other}/"})
