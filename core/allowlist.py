"""Allow-list entries for outbound requests: a network, optionally one port.

Written `127.0.0.1`, `10.0.0.0/8`, `fd00::/8` (any port) or `127.0.0.1:9000`, `10.0.0.0/8:443`,
`[::1]:8080`, `[fd00::/8]:443` (that port only). An IPv6 entry with a port needs the brackets: `::1:80`
is an address, not `::1` on port 80.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass

Address = ipaddress.IPv4Address | ipaddress.IPv6Address
Network = ipaddress.IPv4Network | ipaddress.IPv6Network


@dataclass(frozen=True)
class AllowEntry:
    network: Network
    port: int | None = None  # None: every port

    def admits(self, address: Address, port: int) -> bool:
        return (
            address.version == self.network.version
            and address in self.network
            and (self.port is None or self.port == port)
        )

    def __str__(self) -> str:
        if self.port is None:
            return str(self.network)
        if self.network.version == 6:
            return f"[{self.network}]:{self.port}"
        return f"{self.network}:{self.port}"


def _network(text: str, entry: str) -> Network:
    try:
        return ipaddress.ip_network(text, strict=False)
    except ValueError:
        raise ValueError(
            f"{entry!r} is not an address or network such as 10.0.0.0/8, 127.0.0.1:9000 or [::1]:8080"
        ) from None


def _port(text: str, entry: str) -> int:
    if not text.isdigit():
        raise ValueError(f"{entry!r}: {text!r} is not a port number")
    port = int(text)
    if not 1 <= port <= 65535:
        raise ValueError(f"{entry!r}: port {port} is not from 1 to 65535")
    return port


def parse_entry(entry: str) -> AllowEntry:
    """One entry; ValueError saying what is wrong with it."""
    if entry.startswith("["):
        inside, bracket, rest = entry[1:].partition("]")
        if not bracket:
            raise ValueError(f"{entry!r} has no closing bracket")
        if rest.startswith("/"):  # [fd00::]/8:443
            prefix, _, port = rest[1:].partition(":")
            inside, rest = f"{inside}/{prefix}", f":{port}" if port else ""
        network = _network(inside, entry)
        if network.version != 6:
            raise ValueError(f"{entry!r}: brackets are for IPv6 addresses; write {inside}:port")
        if rest and not rest.startswith(":"):
            raise ValueError(f"{entry!r}: only ':port' must follow the closing bracket")
        return AllowEntry(network, _port(rest[1:], entry) if rest else None)
    if entry.count(":") == 1:  # IPv4 with a port (IPv6 has at least two colons)
        host, _, port = entry.partition(":")
        network = _network(host, entry)
        return AllowEntry(network, _port(port, entry))
    return AllowEntry(_network(entry, entry))


def parse_allowlist(raw: str) -> tuple[AllowEntry, ...]:
    """Comma-separated entries, duplicates dropped; ValueError naming the first bad one."""
    entries: list[AllowEntry] = []
    for item in raw.split(","):
        item = item.strip()
        if item:
            entry = parse_entry(item)
            if entry not in entries:
                entries.append(entry)
    return tuple(entries)
