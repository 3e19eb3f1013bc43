"""`http_request`: GET or POST a URL on the public internet, within size and time limits.

Private, loopback and link-local targets are refused at connect time by core.outbound (an operator
allow-lists networks, or single ports, with VOUCH_AGENT_HTTP_ALLOWLIST), and so is the service's own
listener, whatever the allow-list says. The request happens in `perform`, outside any
transaction, so a POST is not repeatable: after a crash between sending and recording, a human
decides whether to send it again.
"""

from __future__ import annotations

import time
from datetime import datetime
from typing import Any

import httpx

from agents.tool_base import Tool, ToolContext, ToolFailed
from core.outbound import OutboundRefused, agent_policy, check_url, guarded_client
from core.settings import Settings
from core.tool_args import TOOL_PARAMETERS

MAX_BODY_BYTES = 256 * 1024
TIMEOUT_SECONDS = 20.0
# Headers worth showing a model and a reviewer; the rest (cookies, tracing) is noise or sensitive.
KEPT_HEADERS = ("content-type", "content-length", "location", "retry-after", "date")


class HttpRequest(Tool):
    name = "http_request"
    performs_outside = True
    acts_on_world = True
    description = (
        "Make an HTTP GET or POST request to a public URL. Answers status, a few headers and the body "
        f"(text, cut at {MAX_BODY_BYTES // 1024} KiB). Redirects are not followed."
    )
    parameters = TOOL_PARAMETERS[name]

    def repeatable(self, args: dict[str, Any]) -> bool:
        return str(args.get("method", "GET")).upper() == "GET"

    async def perform(self, settings: Settings, args: dict[str, Any], started_at: datetime) -> Any:
        method = str(args.get("method", "GET")).upper()
        if method not in ("GET", "POST"):
            raise ToolFailed(f"method must be GET or POST, not {method!r}")
        url = str(args.get("url", ""))
        headers = {}
        content: bytes | None = None
        if method == "POST":
            content = str(args.get("body", "")).encode()
            headers["Content-Type"] = str(args.get("contentType") or "application/json")
        began = time.perf_counter()
        try:
            policy = agent_policy(settings)
            await check_url(policy, url)
            async with (
                guarded_client(policy, timeout=TIMEOUT_SECONDS) as client,
                client.stream(method, url, content=content, headers=headers) as answer,
            ):
                body = bytearray()
                async for chunk in answer.aiter_bytes():
                    body += chunk
                    if len(body) > MAX_BODY_BYTES:
                        break
                truncated = len(body) > MAX_BODY_BYTES
                return {
                    "method": method,
                    "url": url,
                    "status": answer.status_code,
                    "headers": {k: v for k, v in answer.headers.items() if k.lower() in KEPT_HEADERS},
                    "body": bytes(body[:MAX_BODY_BYTES]).decode(answer.encoding or "utf-8", errors="replace"),
                    "truncated": truncated,
                    "elapsedMs": round((time.perf_counter() - began) * 1000),
                }
        except OutboundRefused as exc:
            raise ToolFailed(f"refused: {exc}") from None
        except httpx.TimeoutException:
            raise ToolFailed(f"{method} {url} timed out after {TIMEOUT_SECONDS:g} s") from None
        except httpx.HTTPError as exc:
            raise ToolFailed(f"{method} {url} failed: {exc}") from None

    async def record(self, ctx: ToolContext, args: dict[str, Any], outcome: Any) -> dict[str, Any]:
        result: dict[str, Any] = outcome
        return result
