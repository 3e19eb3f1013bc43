"""A local OpenAI-compatible chat completions server that plays a script, so the real client code runs.

Each scripted turn is a function of the request body (the messages the agent sent) that returns what the
"model" answers: tool calls, text, or an HTTP error. The server keeps every request it received.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

Turn = Callable[[dict[str, Any]], "Answer"]


@dataclass
class Answer:
    tool_calls: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    text: str | None = None
    status: int = 200
    error: str = ""
    headers: dict[str, str] = field(default_factory=dict)
    usage: tuple[int, int] = (100, 20)


def call(tool: str, **args: Any) -> Answer:
    return Answer(tool_calls=[(tool, args)])


def say(text: str) -> Answer:
    return Answer(text=text)


def fail(status: int, error: str, **headers: str) -> Answer:
    return Answer(status=status, error=error, headers=headers)


def last_tool_result(body: dict[str, Any]) -> str:
    """What the agent answered to the model's last tool call."""
    tools = [m for m in body["messages"] if m["role"] == "tool"]
    return str(tools[-1]["content"]) if tools else ""


@dataclass
class FakeLLM:
    base_url: str
    requests: list[dict[str, Any]]
    script: list[Turn]

    def add(self, *turns: Answer | Turn) -> None:
        for turn in turns:
            self.script.append(turn if callable(turn) else (lambda _body, t=turn: t))


@asynccontextmanager
async def fake_llm(*turns: Answer | Turn) -> AsyncIterator[FakeLLM]:
    ids = itertools.count(1)
    server = FakeLLM("", [], [])
    server.add(*turns)

    async def completions(request: web.Request) -> web.Response:
        body = await request.json()
        server.requests.append(body)
        if not server.script:
            return web.json_response({"error": {"message": "the script has no more turns"}}, status=500)
        answer = server.script.pop(0)(body)
        if answer.status != 200:
            return web.json_response(
                {"error": {"message": answer.error, "type": "scripted"}}, status=answer.status, headers=answer.headers
            )
        message: dict[str, Any] = {"role": "assistant", "content": answer.text}
        if answer.tool_calls:
            message["tool_calls"] = [
                {"id": f"call_{next(ids)}", "type": "function", "function": {"name": n, "arguments": json.dumps(a)}}
                for n, a in answer.tool_calls
            ]
        prompt, completion = answer.usage
        return web.json_response(
            {
                "id": f"chatcmpl-{next(ids)}",
                "object": "chat.completion",
                "created": 1,
                "model": body.get("model", "scripted"),
                "choices": [
                    {"index": 0, "message": message, "finish_reason": "tool_calls" if answer.tool_calls else "stop"}
                ],
                "usage": {
                    "prompt_tokens": prompt,
                    "completion_tokens": completion,
                    "total_tokens": prompt + completion,
                },
            }
        )

    app = web.Application()
    app.router.add_post("/v1/chat/completions", completions)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    server.base_url = f"http://127.0.0.1:{port}/v1"
    try:
        yield server
    finally:
        await runner.cleanup()
