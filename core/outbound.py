"""The guard on outbound HTTP (webhooks, the http_request tool): no requests into private networks.

A URL check before sending is not enough: the name can resolve to a public address when checked and to
127.0.0.1 when connected (DNS rebinding). So the check lives in the network backend of the HTTP client:
`connect_tcp` resolves the host itself, refuses unless every address is public or allow-listed, and
connects to one of the addresses it checked. TLS still verifies and sends SNI for the host name, because
httpcore passes the origin's host to `start_tls`, not the address we connected to.
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Iterable, Sequence
from urllib.parse import urlsplit

import anyio
import httpcore
import httpx
from httpcore._backends.anyio import AnyIOBackend
from httpcore._backends.base import SOCKET_OPTION, AsyncNetworkStream

from core.settings import Settings

Address = ipaddress.IPv4Address | ipaddress.IPv6Address
Network = ipaddress.IPv4Network | ipaddress.IPv6Network


class OutboundRefused(Exception):
    """The target resolves to an address outbound requests may not reach."""

    def __init__(self, message: str, *, address: str | None = None) -> None:
        super().__init__(message)
        self.address = address


def _refused(host: str, address: str, reason: str) -> OutboundRefused:
    shown = host if host == address else f"{host} ({address})"
    return OutboundRefused(
        f"refused to connect to {shown}: the address is {reason}; an operator can allow it by adding its "
        "network to VOUCH_OUTBOUND_ALLOWLIST (comma-separated CIDRs)",
        address=address,
    )


def _networks(settings: Settings) -> tuple[Network, ...]:
    return tuple(ipaddress.ip_network(cidr, strict=False) for cidr in settings.outbound_allowlist)


def _why_refused(address: Address) -> str | None:
    """Why an address is not public, or None when it is."""
    for flag, reason in (
        ("is_unspecified", "unspecified"),
        ("is_loopback", "loopback"),
        ("is_link_local", "link-local"),
        ("is_multicast", "multicast"),
        ("is_private", "private"),
        ("is_reserved", "reserved"),
    ):
        if getattr(address, flag):
            return reason
    # Shared address space (100.64/10), benchmarking and documentation ranges are none of the above.
    return None if address.is_global else "not globally routable"


def _allowed(address: Address, allow: Sequence[Network]) -> bool:
    return any(address.version == network.version and address in network for network in allow)


def check_address(settings: Settings, host: str, raw: str) -> Address:
    """The parsed address, or OutboundRefused naming why it may not be reached."""
    shown = raw.split("%", 1)[0]  # drop an IPv6 zone ("fe80::1%eth0")
    address = ipaddress.ip_address(shown)
    allow = _networks(settings)
    candidates: list[Address] = [address]
    if isinstance(address, ipaddress.IPv6Address):
        # ::ffff:127.0.0.1 reaches 127.0.0.1, and 6to4 / Teredo wrap an IPv4 address too: judge what is inside.
        embedded = address.ipv4_mapped or address.sixtofour or (address.teredo[1] if address.teredo else None)
        if embedded is not None:
            candidates.insert(0, embedded)  # its reason ("loopback") says more than the wrapper's ("private")
    if any(_allowed(candidate, allow) for candidate in candidates):
        return address
    for candidate in candidates:
        reason = _why_refused(candidate)
        if reason is not None:
            raise _refused(host, shown, reason)
    return address


async def resolve_checked(settings: Settings, host: str, port: int) -> list[str]:
    """Every address `host` resolves to, all checked; refused if any one is not allowed (a name with one
    public and one private address must not be a way in)."""
    try:
        infos = await anyio.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except OSError as exc:
        raise httpcore.ConnectError(f"cannot resolve {host}: {exc}") from exc
    addresses: list[str] = []
    for _family, _kind, _proto, _canon, sockaddr in infos:
        raw = str(sockaddr[0])
        check_address(settings, host, raw)
        if raw not in addresses:
            addresses.append(raw)
    if not addresses:
        raise httpcore.ConnectError(f"{host} resolves to no address")
    return addresses


class GuardedBackend(AnyIOBackend):
    """httpcore's AnyIO backend, connecting only to addresses it has resolved and checked itself."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[SOCKET_OPTION] | None = None,
    ) -> AsyncNetworkStream:
        with anyio.fail_after(timeout):
            addresses = await resolve_checked(self.settings, host, port)
        last: Exception | None = None
        for address in addresses:
            try:
                # An address literal: anyio connects to exactly this, with no second lookup to rebind.
                return await super().connect_tcp(address, port, timeout, local_address, socket_options)
            except (httpcore.ConnectError, httpcore.ConnectTimeout) as exc:
                last = exc
        assert last is not None
        raise last

    async def connect_unix_socket(
        self, path: str, timeout: float | None = None, socket_options: Iterable[SOCKET_OPTION] | None = None
    ) -> AsyncNetworkStream:
        raise OutboundRefused(f"refused to connect to the local socket {path}")


class GuardedTransport(httpx.AsyncHTTPTransport):
    """httpx's transport over a connection pool that uses the guarded backend."""

    def __init__(self, settings: Settings) -> None:
        # No proxies from the environment: a proxy would connect to the target for us, unchecked.
        super().__init__(trust_env=False)
        self._pool = httpcore.AsyncConnectionPool(
            ssl_context=httpx.create_ssl_context(trust_env=False),
            network_backend=GuardedBackend(settings),
        )


def guarded_client(settings: Settings, *, timeout: float, follow_redirects: bool = False) -> httpx.AsyncClient:
    """An HTTP client whose every connection (each redirect hop too, when followed) is checked."""
    return httpx.AsyncClient(
        transport=GuardedTransport(settings),
        timeout=timeout,
        follow_redirects=follow_redirects,
        trust_env=False,
    )


async def check_url(settings: Settings, url: str) -> None:
    """Early validation of a target URL (the connect-time check still applies when it is used)."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https"):
        raise OutboundRefused(f"refused {url!r}: only http and https URLs are allowed")
    host = parts.hostname
    if not host:
        raise OutboundRefused(f"refused {url!r}: the URL names no host")
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:
        raise OutboundRefused(f"refused {url!r}: the port is not a number from 0 to 65535") from None
    await resolve_checked(settings, host, port)
