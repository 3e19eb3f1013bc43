"""Ports for servers that cannot bind port 0 themselves (aiosmtpd's Controller, `vouch web --port`)."""

from __future__ import annotations

import socket


def free_port() -> int:
    """A port nothing listens on right now (closed again on return, so a test may also use it as unreachable)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port
