"""A tiny HTTP server on a free port that answers what a test scripted and records what it was sent.

The client's own tests run with only the client installed, so there is no Vouch to talk to: this stands in for
one at the HTTP level (real sockets, real requests), answering as the API documents.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlsplit


@dataclass(frozen=True)
class Reply:
    status: int
    body: Any = None  # a dict or list is sent as JSON, a str as text/html
    headers: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Seen:
    method: str
    path: str
    query: str
    headers: dict[str, str]
    body: Any


def problem(status: int, code: str, detail: str) -> Reply:
    body = {"success": False, "type": f"https://vouch.dev/problems/{code}", "title": "", "status": status}
    return Reply(status, {**body, "detail": detail, "code": code}, {"Content-Type": "application/problem+json"})


def status_record(execution_id: str = "exe_1", status: str = "completed", **extra: Any) -> dict[str, Any]:
    """A status record as GET /api/eval/status/<id> answers it."""
    return {
        "success": True,
        "executionId": execution_id,
        "taskName": "Release note",
        "status": status,
        "testMode": "without-verification",
        "assignedReviewer": None,
        "chatUrl": f"http://vouch.example/chat/{execution_id}?token=t",
        "createdAt": "2026-01-02T03:04:05Z",
        "completedAt": "2026-01-02T03:04:09Z" if status in ("completed", "failed", "rejected", "cancelled") else None,
        "checkpointCount": 0,
        "checkpoints": [],
        "metrics": {"durationMs": 4000, "steps": 2, "toolCalls": 2},
        **extra,
    }


@dataclass
class Stub:
    base: str = ""
    seen: list[Seen] = field(default_factory=list)
    _replies: dict[tuple[str, str], list[Reply]] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def on(self, method: str, path: str, *replies: Reply) -> None:
        """Answer `method path` with these replies in turn, the last one from then on."""
        self._replies[(method, path)] = list(replies)

    def reply_to(self, method: str, path: str) -> Reply:
        with self._lock:
            queued = self._replies.get((method, path))
            if not queued:
                return problem(404, "not_found", f"the stub has no answer for {method} {path}")
            return queued.pop(0) if len(queued) > 1 else queued[0]


def _handler(stub: Stub) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def _serve(self) -> None:
            url = urlsplit(self.path)
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length else b""
            body = json.loads(raw) if raw else None
            with stub._lock:
                stub.seen.append(Seen(self.command, url.path, url.query, dict(self.headers.items()), body))
            reply = stub.reply_to(self.command, url.path)
            if isinstance(reply.body, str):
                payload, kind = reply.body.encode(), "text/html"
            else:
                payload, kind = json.dumps(reply.body).encode(), "application/json"
            self.send_response(reply.status)
            headers = {"Content-Type": kind, **reply.headers, "Content-Length": str(len(payload))}
            for name, value in headers.items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(payload)

        do_GET = do_POST = do_PATCH = do_DELETE = _serve

        def log_message(self, format: str, *args: Any) -> None:
            pass  # the test reads `stub.seen`, not stderr

    return Handler


@contextmanager
def serving() -> Iterator[Stub]:
    stub = Stub()
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(stub))
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, name="stub-http", daemon=True)
    thread.start()
    stub.base = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        yield stub
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)
