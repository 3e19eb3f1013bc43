"""/static and /vendor: the files' bytes, conditional requests, and no file left open by a cancelled request."""

from __future__ import annotations

import asyncio
import gc
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from quart import Quart

from api.app import create_app
from chat.pages import VENDOR_FILES
from core.settings import Settings

STATIC = Path(__file__).resolve().parents[2] / "static"


@pytest.fixture
async def app(settings: Settings) -> AsyncIterator[Quart]:
    made = create_app(settings, run_worker=False)
    async with made.test_app():
        yield made


@pytest.mark.parametrize(
    ("path", "file", "mimetype"),
    [
        ("/static/js/copy.js", STATIC / "js" / "copy.js", "text/javascript"),
        ("/static/favicon.svg", STATIC / "favicon.svg", "image/svg+xml"),
        ("/vendor/socket.io.min.js", VENDOR_FILES["socket.io.min.js"], "text/javascript"),
    ],
)
async def test_a_file_is_served_whole_then_as_not_modified(app: Quart, path: str, file: Path, mimetype: str) -> None:
    client = app.test_client()
    first = await client.get(path)
    assert first.status_code == 200
    assert await first.get_data() == file.read_bytes()
    assert first.mimetype == mimetype
    etag = first.headers["ETag"]
    again = await client.get(path, headers={"If-None-Match": etag})
    assert again.status_code == 304 and await again.get_data() == b""
    ranged = await client.get(path, headers={"Range": "bytes=0-9"})
    assert ranged.status_code == 206 and await ranged.get_data() == file.read_bytes()[:10]


@pytest.mark.parametrize("path", ["/static/../pyproject.toml", "/static/js/", "/static/nothing.js", "/vendor/x.js"])
async def test_names_outside_the_files_are_not_found(app: Quart, path: str) -> None:
    assert (await app.test_client().get(path)).status_code == 404


async def test_a_request_dropped_at_any_point_leaves_no_file_open(app: Quart) -> None:
    # A browser that navigates on drops its script requests midway: the server hears http.disconnect and Quart
    # cancels the handler. Dropped after 0, 1, 2 ... turns of the loop, requests stop all along their way; a file
    # opened and then abandoned is a ResourceWarning, an error here (filterwarnings), once the collector finds it.
    async def drop(path: str, turns: int) -> None:
        dropped = asyncio.Event()
        messages = [{"type": "http.request", "body": b"", "more_body": False}]

        async def receive() -> dict[str, Any]:
            if messages:
                return messages.pop()
            await dropped.wait()
            return {"type": "http.disconnect"}

        async def send(message: dict[str, Any]) -> None:
            await asyncio.sleep(0)

        scope = {
            "type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "GET", "scheme": "http",
            "path": path, "raw_path": path.encode(), "query_string": b"", "root_path": "",
            "headers": [(b"host", b"localhost")], "client": ("127.0.0.1", 1), "server": ("localhost", 80),
            "extensions": {},
        }
        served = asyncio.ensure_future(app(scope, receive, send))  # type: ignore[arg-type]
        for _ in range(turns):
            await asyncio.sleep(0)
        dropped.set()
        await served

    for path in ("/static/js/copy.js", "/vendor/socket.io.min.js"):
        for turns in range(40):
            await drop(path, turns)
    # The executor's threads finish any open still under way; a file they opened for a dropped request is garbage.
    await asyncio.get_running_loop().shutdown_default_executor()
    gc.collect()
