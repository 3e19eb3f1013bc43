"""A real HTTP server on a free port that answers one route with a test's own handler (a hook, a collector that
hangs): the server's setup and teardown, once."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

from aiohttp import web


@asynccontextmanager
async def route_server(
    path: str, handler: Callable[[web.Request], Awaitable[web.Response]], method: str = "POST"
) -> AsyncIterator[str]:
    """Yields the route's URL, http://127.0.0.1:<port>`path`."""
    app = web.Application()
    app.router.add_route(method, path, handler)
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    try:
        yield f"http://127.0.0.1:{runner.addresses[0][1]}{path}"
    finally:
        await runner.cleanup()
