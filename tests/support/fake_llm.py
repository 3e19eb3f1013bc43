"""A local OpenAI-compatible chat completions server that plays a script, so the real client code runs.

Each scripted turn is a function of the request body (the messages the agent sent) that returns what the
"model" answers: tool calls, text, or an HTTP error. The server keeps every request it received, and its
headers (so a test can see which key the client sent).

It speaks both wire formats: OpenAI's chat completions (POST /v1/chat/completions) and Anthropic's Messages
API (POST /v1/messages, tool_use blocks, usage as input_tokens/output_tokens), each from the same script, and
each either whole or streamed (server-sent events, as the providers send them when the request says `stream`):
streamed, the text leaves a word at a time, and an answer with `hold` stops after `hold_after` words until the
test sets it, so a test can look at the world while the model is still writing.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import re
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
    # Streamed only: the words after the first `hold_after` wait until the test sets `hold`.
    hold: asyncio.Event | None = None
    hold_after: int = 1


def words(text: str) -> list[str]:
    """The pieces a streamed text leaves in: a word and the space after it."""
    return re.findall(r"\S+\s*|\s+", text)


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

    async def sse(request: web.Request, events: Any) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
        await response.prepare(request)
        async for name, data in events:
            head = f"event: {name}\n" if name else ""
            await response.write(f"{head}data: {data if isinstance(data, str) else json.dumps(data)}\n\n".encode())
        await response.write_eof()
        return response

    async def text_pieces(answer: Answer) -> AsyncIterator[tuple[int, str]]:
        for n, piece in enumerate(words(answer.text or "")):
            if answer.hold is not None and n == answer.hold_after:
                await answer.hold.wait()
            yield n, piece

    async def completion_chunks(body: dict[str, Any], answer: Answer) -> AsyncIterator[tuple[str, Any]]:
        ident, model = f"chatcmpl-{next(ids)}", body.get("model", "scripted")

        def chunk(delta: dict[str, Any], finish: str | None = None) -> tuple[str, Any]:
            choice = {"index": 0, "delta": delta, "finish_reason": finish}
            return "", {"id": ident, "object": "chat.completion.chunk", "created": 1, "model": model,
                        "choices": [choice]}  # fmt: skip

        yield chunk({"role": "assistant", "content": ""})
        async for _, piece in text_pieces(answer):
            yield chunk({"content": piece})
        if answer.refusal:
            yield chunk({"refusal": answer.refusal})
        for index, (name, args) in enumerate(answer.tool_calls):
            call = {"index": index, "id": f"call_{next(ids)}", "type": "function"}
            yield chunk({"tool_calls": [{**call, "function": {"name": name, "arguments": json.dumps(args)}}]})
        yield chunk({}, answer.finish_reason or ("tool_calls" if answer.tool_calls else "stop"))
        prompt, completion = answer.usage
        usage = {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}
        yield "", {"id": ident, "object": "chat.completion.chunk", "created": 1, "model": model, "choices": [],
                   "usage": usage}  # fmt: skip
        yield "", "[DONE]"

    async def message_events(body: dict[str, Any], answer: Answer) -> AsyncIterator[tuple[str, Any]]:
        prompt, completion = answer.usage
        message = {"id": f"msg_{next(ids)}", "type": "message", "role": "assistant", "model": body.get("model"),
                   "content": [], "stop_reason": None, "stop_sequence": None,
                   "usage": {"input_tokens": prompt, "output_tokens": 0}}  # fmt: skip
        yield "message_start", {"type": "message_start", "message": message}
        index = 0
        if answer.text:
            yield "content_block_start", {"type": "content_block_start", "index": 0,
                                          "content_block": {"type": "text", "text": ""}}  # fmt: skip
            async for _, piece in text_pieces(answer):
                delta = {"type": "text_delta", "text": piece}
                yield "content_block_delta", {"type": "content_block_delta", "index": 0, "delta": delta}
            yield "content_block_stop", {"type": "content_block_stop", "index": 0}
            index = 1
        for name, args in answer.tool_calls:
            block = {"type": "tool_use", "id": f"toolu_{next(ids)}", "name": name, "input": {}}
            yield "content_block_start", {"type": "content_block_start", "index": index, "content_block": block}
            delta = {"type": "input_json_delta", "partial_json": json.dumps(args)}
            yield "content_block_delta", {"type": "content_block_delta", "index": index, "delta": delta}
            yield "content_block_stop", {"type": "content_block_stop", "index": index}
            index += 1
        stop = {"stop_reason": "tool_use" if answer.tool_calls else "end_turn", "stop_sequence": None}
        yield "message_delta", {"type": "message_delta", "delta": stop, "usage": {"output_tokens": completion}}
        yield "message_stop", {"type": "message_stop"}

    async def completions(request: web.Request) -> web.StreamResponse:
        body = await request.json()
        answer = next_answer(request, body)
        if answer is None:
            return web.json_response({"error": {"message": "the script has no more turns"}}, status=500)
        if answer.status != 200:
            return web.json_response(
                {"error": {"message": answer.error, "type": "scripted"}}, status=answer.status, headers=answer.headers
            )
        if body.get("stream"):
            return await sse(request, completion_chunks(body, answer))
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

    async def messages(request: web.Request) -> web.StreamResponse:
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
        if body.get("stream"):
            return await sse(request, message_events(body, answer))
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
