"""A real HTTP server on a free port whose every GET answers "hello": a service an agent tool may or may not reach."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from aiohttp import web


@asynccontextmanager
async def hello_server(host: str = "127.0.0.1") -> AsyncIterator[str]:
    """Yields the server's base URL, http://`host`:<port>."""

    async def hello(_request: web.Request) -> web.Response:
        return web.Response(text="hello")

    app = web.Application()
    app.router.add_get("/{tail:.*}", hello)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, host, 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        yield f"http://{host}:{port}"
    finally:
        await runner.cleanup()


def port_of(url: str) -> int:
    """The port of a base URL such as hello_server yields (http://host:port[/path])."""
    return int(url.rsplit(":", 1)[1].split("/", 1)[0])
