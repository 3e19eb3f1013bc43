"""A real server on a free port: the ASGI app under uvicorn, in a thread of its own."""

from __future__ import annotations

import asyncio
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager

import uvicorn

from api.app import create_asgi_app
from core.settings import Settings
from tests.support.ports import free_port

# For the tests' HTTP clients of a live server or a `vouch` process: httpx's default of 5 s is shorter than an
# answer can take while a loaded 2-core machine runs the suite on several workers, and no test measures latency
# through these clients (a test that does states its own bound).
HTTP_TIMEOUT = 30.0


@contextmanager
def live_server(settings: Settings, *, run_worker: bool, port: int = 0) -> Iterator[str]:
    """Serve the app on 127.0.0.1:<free port> (or `port`, for a base URL known in advance); yields its base URL."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", port))
    port = sock.getsockname()[1]
    config = uvicorn.Config(
        create_asgi_app(settings, run_worker=run_worker), log_level="warning", lifespan="on", ws="websockets-sansio"
    )
    server = uvicorn.Server(config)
    failure: list[BaseException] = []

    def serve() -> None:
        try:
            asyncio.run(server.serve(sockets=[sock]))
        except BaseException as exc:  # surfaced to the test below
            failure.append(exc)

    thread = threading.Thread(target=serve, name="live-server", daemon=True)
    thread.start()
    while not server.started:
        if failure or not thread.is_alive():
            raise RuntimeError(f"live server did not start: {failure}")
        threading.Event().wait(0.01)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=15)
        sock.close()
        if failure:
            raise failure[0]


def at_own_address(settings: Settings) -> tuple[Settings, int]:
    """Settings whose public address is the live server's own (pass the port to `live_server`), so that its pages'
    sockets pass the same-origin check and its links lead back to it, as on a real deployment."""
    port = free_port()
    return settings.with_changes(base_url=f"http://127.0.0.1:{port}"), port
