"""A real webhook receiver on 127.0.0.1 (aiohttp, in the test's event loop) that verifies every signature
with the `standardwebhooks` library, as a caller's receiver would, and answers from a script."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web
from standardwebhooks.webhooks import Webhook


@dataclass(frozen=True)
class Answer:
    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)
    body: str = "ok"


@dataclass
class Received:
    headers: dict[str, str]
    body: bytes
    verified_with: list[int]  # indexes of the secrets whose signature verifies
    at: float = field(default_factory=time.monotonic)  # when it came: how far apart repeats were

    @property
    def webhook_id(self) -> str:
        return self.headers["webhook-id"]

    @property
    def signatures(self) -> list[str]:
        return self.headers["webhook-signature"].split(" ")


@dataclass
class Receiver:
    url: str
    secrets: list[str]
    script: list[Answer]
    received: list[Received] = field(default_factory=list)
    arrived: asyncio.Event = field(default_factory=asyncio.Event)

    def verify(self, headers: dict[str, str], body: bytes, secret: str) -> bool:
        try:
            Webhook(secret).verify(body, headers)
        except Exception:
            return False
        return True

    async def handle(self, request: web.Request) -> web.Response:
        body = await request.read()
        headers = {k.lower(): v for k, v in request.headers.items()}
        verified = [i for i, secret in enumerate(self.secrets) if self.verify(headers, body, secret)]
        self.received.append(Received(headers, body, verified))
        self.arrived.set()
        answer = self.script.pop(0) if self.script else Answer()
        return web.Response(status=answer.status, headers=answer.headers, text=answer.body)

    async def count(self, n: int) -> list[Received] | None:
        """For `until`: the requests once there are at least `n`."""
        return self.received if len(self.received) >= n else None

    def payloads(self) -> list[dict[str, Any]]:
        import json

        return [json.loads(r.body) for r in self.received]


@asynccontextmanager
async def webhook_receiver(
    secrets: list[str], script: list[Answer] | None = None, *, port: int = 0, path: str = "/hook"
) -> AsyncIterator[Receiver]:
    """A receiver at http://127.0.0.1:<port><path>; every request is checked against each of `secrets`."""
    receiver = Receiver("", list(secrets), list(script or []))
    app = web.Application()
    app.router.add_post(path, receiver.handle)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", port)
    await site.start()
    bound = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    receiver.url = f"http://127.0.0.1:{bound}{path}"
    try:
        yield receiver
    finally:
        await runner.cleanup()
