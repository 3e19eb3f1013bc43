"""The guard on outbound HTTP (webhooks, the http_request tool): no requests into private networks.

A URL check before sending is not enough: the name can resolve to a public address when checked and to
127.0.0.1 when connected (DNS rebinding). So the check lives in the network backend of the HTTP client:
`connect_tcp` resolves the host itself, refuses unless every address is public or allow-listed (on that
port), and connects to one of the addresses it checked. Every connection goes through it, so a redirect
hop, when a client follows redirects, is checked as the first request was. TLS still verifies and sends
SNI for the host name, because httpcore passes the origin's host to `start_tls`, not the address we
connected to.

Webhooks and agent tools have separate policies (separate allow-lists); an agent tool's also refuses the
service's own listener, whatever its allow-list says: allow-listing loopback for a local service must not
let the agent read /metrics or act through the API with no key of its own.
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Iterable
from dataclasses import dataclass
from urllib.parse import urlsplit

import anyio
import httpcore
import httpx
from httpcore._backends.anyio import AnyIOBackend
from httpcore._backends.base import SOCKET_OPTION, AsyncNetworkStream

from core.allowlist import Address, AllowEntry
from core.settings import Settings

ALLOWLIST_FORMAT = "comma-separated addresses or networks, each optionally with :port"


class OutboundRefused(Exception):
    """The target resolves to an address outbound requests may not reach."""

    def __init__(self, message: str, *, address: str | None = None) -> None:
        super().__init__(message)
        self.address = address


@dataclass(frozen=True)
class OwnAddress:
    """Where the service itself answers: `host` a name or an address (0.0.0.0 / ::: every one of this host's)."""

    host: str
    port: int
    source: str  # for the refusal: where this address comes from


@dataclass(frozen=True)
class OutboundPolicy:
    allow: tuple[AllowEntry, ...]
    variable: str  # the environment variable that holds `allow`, named in refusals
    own: tuple[OwnAddress, ...] = ()  # refused whatever `allow` says


def webhook_policy(settings: Settings) -> OutboundPolicy:
    return OutboundPolicy(settings.webhook_allowlist, "VOUCH_WEBHOOK_ALLOWLIST")


def agent_policy(settings: Settings) -> OutboundPolicy:
    own: list[OwnAddress] = []
    if settings.listen_address is not None:
        host, port = settings.listen_address
        own.append(OwnAddress(host, port, "where this process listens"))
    if settings.base_url:
        parts = urlsplit(settings.base_url)
        if parts.hostname:
            default = 443 if parts.scheme == "https" else 80
            own.append(OwnAddress(parts.hostname, parts.port or default, "VOUCH_BASE_URL"))
    return OutboundPolicy(settings.agent_http_allowlist, "VOUCH_AGENT_HTTP_ALLOWLIST", tuple(own))


def _shown(host: str, address: str, port: int) -> str:
    return f"{host} port {port}" if host == address else f"{host} ({address}) port {port}"


def _refused(
    policy: OutboundPolicy, host: str, address: str, port: int, reason: str, others: list[int]
) -> OutboundRefused:
    if others:
        ports = ", ".join(str(p) for p in sorted(set(others)))
        advice = f"{policy.variable} allows it on port {ports} only"
    else:
        advice = f"an operator can allow it by adding it to {policy.variable} ({ALLOWLIST_FORMAT})"
    return OutboundRefused(
        f"refused to connect to {_shown(host, address, port)}: the address is {reason}; {advice}", address=address
    )


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


def _candidates(address: Address) -> list[Address]:
    """The address and, first, any IPv4 address it wraps: ::ffff:127.0.0.1 reaches 127.0.0.1, and 6to4 /
    Teredo wrap an IPv4 address too, so what is inside is judged."""
    candidates: list[Address] = [address]
    if isinstance(address, ipaddress.IPv6Address):
        embedded = address.ipv4_mapped or address.sixtofour or (address.teredo[1] if address.teredo else None)
        if embedded is not None:
            candidates.insert(0, embedded)  # its reason ("loopback") says more than the wrapper's ("private")
    return candidates


def check_address(policy: OutboundPolicy, host: str, raw: str, port: int) -> Address:
    """The parsed address, or OutboundRefused naming why it may not be reached on `port`."""
    shown = raw.split("%", 1)[0]  # drop an IPv6 zone ("fe80::1%eth0")
    address = ipaddress.ip_address(shown)
    candidates = _candidates(address)
    if any(entry.admits(candidate, port) for candidate in candidates for entry in policy.allow):
        return address
    for candidate in candidates:
        reason = _why_refused(candidate)
        if reason is not None:
            others = [
                entry.port for entry in policy.allow if entry.port is not None and entry.admits(candidate, entry.port)
            ]
            raise _refused(policy, host, shown, port, reason, others)
    return address


def _is_this_host(address: Address) -> bool:
    """Whether `address` is one of this host's own: only those can be bound."""
    family = socket.AF_INET6 if address.version == 6 else socket.AF_INET
    try:
        with socket.socket(family, socket.SOCK_STREAM) as probe:
            probe.bind((str(address), 0))
    except OSError:
        return False
    return True


async def _addresses_of(host: str, port: int) -> list[Address]:
    try:
        return [_unzoned(str(info[4][0])) for info in await anyio.getaddrinfo(host, port, type=socket.SOCK_STREAM)]
    except OSError:
        return []  # a name that does not resolve now cannot be connected to now either


def _unzoned(raw: str) -> Address:
    return ipaddress.ip_address(raw.split("%", 1)[0])


async def own_address(policy: OutboundPolicy, address: Address, port: int) -> OwnAddress | None:
    """The service listener that `address`:`port` reaches, if it is one of them."""
    candidates = _candidates(address)
    for own in policy.own:
        if port != own.port:
            continue
        if any(c.is_unspecified for c in candidates):
            return own  # connecting to 0.0.0.0 or :: reaches this host itself
        try:
            listening = [ipaddress.ip_address(own.host.strip("[]"))]
        except ValueError:
            listening = await _addresses_of(own.host, own.port)
        if any(a.is_unspecified for a in listening):  # every address of this host
            if any(c.is_loopback or _is_this_host(c) for c in candidates):
                return own
            continue
        mine = {c for a in listening for c in _candidates(a)}
        if mine.intersection(candidates):
            return own
    return None


async def resolve_checked(policy: OutboundPolicy, host: str, port: int) -> list[str]:
    """Every address `host` resolves to, all checked; refused if any one is not allowed (a name with one
    public and one private address must not be a way in)."""
    try:
        infos = await anyio.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except OSError as exc:
        raise httpcore.ConnectError(f"cannot resolve {host}: {exc}") from exc
    addresses: list[str] = []
    for _family, _kind, _proto, _canon, sockaddr in infos:
        raw = str(sockaddr[0])
        own = await own_address(policy, _unzoned(raw), port)
        if own is not None:
            raise OutboundRefused(
                f"refused to connect to {_shown(host, raw, port)}: it is the service's own address "
                f"({own.source}), which no allow-list opens",
                address=raw,
            )
        check_address(policy, host, raw, port)
        if raw not in addresses:
            addresses.append(raw)
    if not addresses:
        raise httpcore.ConnectError(f"{host} resolves to no address")
    return addresses


class GuardedBackend(AnyIOBackend):
    """httpcore's AnyIO backend, connecting only to addresses it has resolved and checked itself."""

    def __init__(self, policy: OutboundPolicy) -> None:
        self.policy = policy

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[SOCKET_OPTION] | None = None,
    ) -> AsyncNetworkStream:
        with anyio.fail_after(timeout):
            addresses = await resolve_checked(self.policy, host, port)
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

    def __init__(self, policy: OutboundPolicy) -> None:
        # No proxies from the environment: a proxy would connect to the target for us, unchecked.
        super().__init__(trust_env=False)
        self._pool = httpcore.AsyncConnectionPool(
            ssl_context=httpx.create_ssl_context(trust_env=False),
            network_backend=GuardedBackend(policy),
        )


def guarded_client(policy: OutboundPolicy, *, timeout: float, follow_redirects: bool = False) -> httpx.AsyncClient:
    """An HTTP client whose every connection (each redirect hop too, when followed) is checked."""
    return httpx.AsyncClient(
        transport=GuardedTransport(policy),
        timeout=timeout,
        follow_redirects=follow_redirects,
        trust_env=False,
    )


async def check_url(policy: OutboundPolicy, url: str) -> None:
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
    await resolve_checked(policy, host, port)
