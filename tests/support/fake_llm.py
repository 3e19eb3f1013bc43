"""A local OpenAI-compatible chat completions server that plays a script, so the real client code runs.

Each scripted turn is a function of the request body (the messages the agent sent) that returns what the
"model" answers: tool calls, text, or an HTTP error. The server keeps every request it received, and its
headers (so a test can see which key the client sent).

It speaks both wire formats: OpenAI's chat completions (POST /v1/chat/completions) and Anthropic's Messages
API (POST /v1/messages, tool_use blocks, usage as input_tokens/output_tokens), each from the same script.
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
    # OpenAI's `refusal` (the model declined), and a finish reason other than the usual one ("length": cut off).
    refusal: str | None = None
    finish_reason: str | None = None


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
    base_url: str  # OpenAI-compatible, ending in /v1
    requests: list[dict[str, Any]]
    script: list[Turn]
    # Plays every turn once the script has run out (a model that decides from the conversation alone).
    then: Turn | None = None
    headers: list[dict[str, str]] = field(default_factory=list)

    @property
    def root(self) -> str:
        """The server's root, where Anthropic's client adds /v1/messages itself."""
        return self.base_url.removesuffix("/v1")

    def add(self, *turns: Answer | Turn) -> None:
        for turn in turns:
            self.script.append(turn if callable(turn) else (lambda _body, t=turn: t))


@asynccontextmanager
async def fake_llm(*turns: Answer | Turn, then: Turn | None = None) -> AsyncIterator[FakeLLM]:
    ids = itertools.count(1)
    server = FakeLLM("", [], [], then)
    server.add(*turns)

    def next_answer(request: web.Request, body: dict[str, Any]) -> Answer | None:
        server.requests.append(body)
        server.headers.append({name.lower(): value for name, value in request.headers.items()})
        if server.script:
            return server.script.pop(0)(body)
        return server.then(body) if server.then is not None else None

    async def completions(request: web.Request) -> web.Response:
        body = await request.json()
        answer = next_answer(request, body)
        if answer is None:
            return web.json_response({"error": {"message": "the script has no more turns"}}, status=500)
        if answer.status != 200:
            return web.json_response(
                {"error": {"message": answer.error, "type": "scripted"}}, status=answer.status, headers=answer.headers
            )
        message: dict[str, Any] = {"role": "assistant", "content": answer.text, "refusal": answer.refusal}
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
                    {
                        "index": 0,
                        "message": message,
                        "finish_reason": answer.finish_reason or ("tool_calls" if answer.tool_calls else "stop"),
                    }
                ],
                "usage": {
                    "prompt_tokens": prompt,
                    "completion_tokens": completion,
                    "total_tokens": prompt + completion,
                },
            }
        )

    async def messages(request: web.Request) -> web.Response:
        """Anthropic's Messages API, for the same script."""
        body = await request.json()
        answer = next_answer(request, body)
        if answer is None or answer.status != 200:
            status, error = (500, "the script has no more turns") if answer is None else (answer.status, answer.error)
            return web.json_response(
                {"type": "error", "error": {"type": "scripted", "message": error}},
                status=status,
                headers=answer.headers if answer is not None else {},
            )
        content: list[dict[str, Any]] = [{"type": "text", "text": answer.text}] if answer.text else []
        content += [
            {"type": "tool_use", "id": f"toolu_{next(ids)}", "name": n, "input": a} for n, a in answer.tool_calls
        ]
        prompt, completion = answer.usage
        return web.json_response(
            {
                "id": f"msg_{next(ids)}",
                "type": "message",
                "role": "assistant",
                "model": body.get("model", "scripted"),
                "content": content,
                "stop_reason": "tool_use" if answer.tool_calls else "end_turn",
                "stop_sequence": None,
                "usage": {"input_tokens": prompt, "output_tokens": completion},
            }
        )

    app = web.Application()
    app.router.add_post("/v1/chat/completions", completions)
    app.router.add_post("/v1/messages", messages)
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
