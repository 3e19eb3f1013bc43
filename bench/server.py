"""The web process the benchmarks run: what `vouch serve` (--worker) or `vouch web` serves, plus bench routes.

    python -m bench.server --port 8123 [--worker]
    python -m bench.server --fd N [--worker]    (a listening socket bound by the parent, handed down)

Built like api/cli.py's `_serve` (same app factory, same logging, and served by its `run_web_server`), with two
additions that exist only here:

- `GET /bench/bare`: a bare Quart JSON route, no auth, no database: the baseline of the status throughput;
- `POST /bench/emit`: commits events through this process's own Database, as the embedded worker does, and
  answers each event's commit moment (CLOCK_MONOTONIC, taken by an event sink registered before the chat's):
  the writer of the embedded chat fan-out.
"""

from __future__ import annotations

import argparse
import logging
import socket
import time
from typing import Any

from quart import Quart, request

from api.app import create_app, freeze_heap_once_serving
from api.cli import listening_socket, run_web_server
from api.mcp_server import mount_mcp
from bench.chat_fanout import write
from chat.socket import mount_chat
from core.logs import configure_logging
from core.settings import load_settings


def add_bench_routes(app: Quart) -> None:
    stamps: dict[str, dict[int, float]] = {}

    async def stamp(message: dict[str, Any]) -> None:
        book = stamps.get(message["executionId"])
        if book is not None:
            book[message["seq"]] = time.monotonic()

    @app.before_serving
    async def register_stamp() -> None:
        # After create_app's start-up (the Database exists), before mount_chat's (its room sink comes second).
        app.extensions["vouch"].db.add_event_sink(stamp)

    @app.get("/bench/bare")
    async def bare() -> dict[str, Any]:
        return {"success": True, "status": "ok"}

    @app.post("/bench/emit")
    async def emit() -> dict[str, Any]:
        body = await request.get_json()
        execution_id, events, batch = str(body["executionId"]), int(body["events"]), int(body["batch"])
        rate = float(body.get("rate") or 0)
        book = stamps[execution_id] = {}
        await write(app.extensions["vouch"].db, execution_id, events, batch, rate or None)
        del stamps[execution_id]
        return {"stamps": {str(seq): at for seq, at in book.items()}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    where = parser.add_mutually_exclusive_group(required=True)
    where.add_argument("--port", type=int)
    # The bench binds its ports itself and keeps them while its processes start, stop and restart: a port found
    # free and bound later by the child could be taken meanwhile (by another test's client connection, in CI).
    where.add_argument("--fd", type=int, help="a listening socket inherited from the parent")
    parser.add_argument("--worker", action="store_true", help="run the worker in this process, as `vouch serve`")
    args = parser.parse_args()
    sock = socket.socket(fileno=args.fd) if args.fd is not None else listening_socket("127.0.0.1", args.port)
    settings = load_settings()
    configure_logging(logging.INFO)
    app = create_app(settings, run_worker=args.worker)
    freeze_heap_once_serving(app)
    add_bench_routes(app)
    run_web_server(mount_mcp(app, mount_chat(app, settings)), settings, sock)


if __name__ == "__main__":
    main()
