"""The conversation with a language model: instructions, tool definitions, history and one request.

The history is a list of pydantic-ai messages, stored as JSON on the execution after every step, so
any worker can resume the conversation where the last one stopped.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any

from pydantic_ai.direct import model_request, model_request_stream
from pydantic_ai.exceptions import (
    ContentFilterError,
    ModelAPIError,
    ModelConnectionError,
    ModelHTTPError,
    ModelRateLimitError,
    ModelServerError,
    ModelUnavailableError,
    UnexpectedModelBehavior,
)
from pydantic_ai.messages import (
    ModelMessage,
    ModelMessagesTypeAdapter,
    ModelRequest,
    ModelResponse,
    PartDeltaEvent,
    PartStartEvent,
    TextPart,
    TextPartDelta,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models import Model, ModelRequestParameters
from pydantic_ai.tools import ToolDefinition

from agents.tools import TOOLS
from core.errors import ExecutionFailed, FailureCode
from core.event_payloads import ModelUsage
from core.model_profiles import ModelProfile
from core.models import Checkpoint, Execution

# Tools a model may call; `summarise` and `wait` serve the offline agent's vocabulary only.
MODEL_TOOLS = ("send_email", "http_request", "write_file", "read_file", "list_files")
FINISH = ToolDefinition(
    name="finish",
    description="Finish the task. Give a short summary of what was done and its outcome.",
    parameters_json_schema={
        "type": "object",
        "properties": {"summary": {"type": "string"}},
        "required": ["summary"],
        "additionalProperties": False,
    },
)
REQUEST_REVIEW = ToolDefinition(
    name="request_review",
    description=(
        "Ask the human reviewer to check your work at one of the task's checkpoints before you go on. "
        "The answer is the reviewer's decision and comment."
    ),
    parameters_json_schema={
        "type": "object",
        "properties": {
            "stage": {"type": "string", "description": "the checkpoint's stage, as listed in your instructions"},
            "summary": {"type": "string", "description": "what the reviewer should look at"},
        },
        "required": ["stage", "summary"],
        "additionalProperties": False,
    },
)


def tool_definitions() -> list[ToolDefinition]:
    tools = [
        ToolDefinition(name=name, description=TOOLS[name].description, parameters_json_schema=TOOLS[name].parameters)
        for name in MODEL_TOOLS
    ]
    return [*tools, REQUEST_REVIEW, FINISH]


def instructions(execution: Execution, checkpoints: list[Checkpoint]) -> str:
    lines = [
        "You are an agent carrying out an evaluation task for Vouch. Work step by step with the tools.",
        f"Task: {execution.task_name}",
        f"Description: {execution.task_description}",
    ]
    caller = [cp for cp in checkpoints if cp.origin == "caller"]
    if caller:
        lines.append("Checkpoints, in order: when you reach each stage, call request_review with that stage.")
        lines += [f"- {cp.stage}: {cp.description} (the reviewer asks: {cp.verification_question})" for cp in caller]
        lines.append(
            "A call of send_email or http_request waits at the next unanswered checkpoint until the reviewer "
            "approves that call; a rejected call does not run, and its result is the reviewer's comment."
        )
    if execution.auto_detect_checkpoints and execution.test_mode == "with-verification":
        lines.append(
            "Every call of send_email or http_request waits for a human reviewer's approval before it runs. "
            "If a call is rejected, its result is the reviewer's comment: revise and try again, or go on without it."
        )
    lines.append("When the task is done, call finish with a short summary. Do not stop without calling finish.")
    return "\n".join(lines)


def first_request(execution: Execution, checkpoints: list[Checkpoint]) -> ModelRequest:
    return ModelRequest(
        parts=[UserPromptPart(f"Carry out the task: {execution.task_name}")],
        instructions=instructions(execution, checkpoints),
    )


def load(history: list[Any]) -> list[ModelMessage]:
    return ModelMessagesTypeAdapter.validate_python(history)


def dump(messages: list[ModelMessage]) -> list[Any]:
    dumped: list[Any] = ModelMessagesTypeAdapter.dump_python(messages, mode="json")
    return dumped


def tool_returns(returns: list[dict[str, Any]]) -> ModelRequest:
    return ModelRequest(
        parts=[ToolReturnPart(tool_name=r["tool"], content=r["content"], tool_call_id=r["id"]) for r in returns]
    )


def nudge(text: str) -> ModelRequest:
    return ModelRequest(parts=[UserPromptPart(text)])


# Hears each piece of the answer's text as the model writes it.
TextListener = Callable[[str], Awaitable[None]]


async def ask(
    model: Model, messages: list[ModelMessage], retries: int, on_text: TextListener | None = None
) -> ModelResponse:
    """One request; a failure ends the run with its code (core/errors.py). `retries` is what the client was
    built with (providers.py), named in the error. With `on_text`, the answer is streamed and each piece of its
    text handed over as it arrives; the response returned is the same whole one either way."""
    parameters = ModelRequestParameters(function_tools=tool_definitions(), allow_text_output=True)
    try:
        if on_text is None:
            return await model_request(model, messages, model_request_parameters=parameters)
        async with model_request_stream(model, messages, model_request_parameters=parameters) as stream:
            async for event in stream:
                if isinstance(event, PartStartEvent) and isinstance(event.part, TextPart) and event.part.content:
                    await on_text(event.part.content)
                elif isinstance(event, PartDeltaEvent) and isinstance(event.delta, TextPartDelta):
                    if event.delta.content_delta:
                        await on_text(event.delta.content_delta)
            return stream.get()
    except ContentFilterError as exc:
        detail = f"the provider's content filter stopped the answer: {exc}"
        raise ExecutionFailed(FailureCode.MODEL_REFUSED, detail) from exc
    except ModelAPIError as exc:
        # The client already retried what waiting can cure (connection errors, timeouts, 408, 409, 429, 5xx), with
        # backoff and honouring Retry-After, `agent_request_retries` times: what reaches here is final.
        said = f"HTTP {exc.status_code}: {_short(exc.body)}" if isinstance(exc, ModelHTTPError) else str(exc)
        if _transient(exc):
            detail = f"the model provider is unavailable ({said}) after {retries} retries with backoff"
            raise ExecutionFailed(FailureCode.MODEL_UNAVAILABLE, detail) from exc
        raise ExecutionFailed(FailureCode.PROVIDER_FAILED, f"the model provider answered {said}") from exc
    except UnexpectedModelBehavior as exc:
        raise ExecutionFailed(FailureCode.PROVIDER_FAILED, f"the model provider's answer is unusable: {exc}") from exc


def _transient(exc: ModelAPIError) -> bool:
    if isinstance(exc, ModelRateLimitError | ModelUnavailableError | ModelServerError | ModelConnectionError):
        return True
    status = exc.status_code if isinstance(exc, ModelHTTPError) else None
    return status is not None and (status >= 500 or status in (408, 409, 429))


def _short(body: object) -> str:
    text = body if isinstance(body, str) else json.dumps(body, default=str)
    return text[:300]


def calls_of(response: ModelResponse) -> list[dict[str, Any]]:
    """The response's tool calls as plain data; arguments that are not a JSON object are kept as text."""
    calls = []
    for part in response.parts:
        if isinstance(part, ToolCallPart):
            try:
                args: dict[str, Any] = part.args_as_dict()
                valid = True
            except (ValueError, TypeError, AssertionError):
                args, valid = {"raw": str(part.args)}, False
            calls.append({"id": part.tool_call_id, "tool": part.tool_name, "args": args, "validArgs": valid})
    return calls


def refusal_of(response: ModelResponse) -> str | None:
    """Why the model declined to answer (a refusal, a content filter), or None when it did not."""
    if response.finish_reason != "content_filter":
        return None
    said = (response.provider_details or {}).get("refusal")
    return str(said) if said else "the provider's content filter stopped the answer"


def cut_off(response: ModelResponse) -> bool:
    """The answer stopped at the output limit: its text is not a whole answer."""
    return response.finish_reason == "length"


def text_of(response: ModelResponse) -> str:
    return "".join(part.content for part in response.parts if isinstance(part, TextPart)).strip()


def usage_of(response: ModelResponse, profile: ModelProfile | None = None) -> ModelUsage:
    """Tokens and price of one response: at the profile's prices when it gives them, else genai-prices'."""
    input_tokens, output_tokens = response.usage.input_tokens, response.usage.output_tokens
    cost = profile.cost_usd(input_tokens, output_tokens) if profile is not None else None
    if cost is None:
        try:
            cost = float(response.cost().total_price)
        except (LookupError, ValueError, AssertionError):
            cost = None  # genai-prices does not know this model (local servers, new models): unknown, not 0
    return {"model": response.model_name, "inputTokens": input_tokens, "outputTokens": output_tokens, "costUsd": cost}


def missing_arguments(tool: str, args: dict[str, Any]) -> list[str]:
    schema = TOOLS[tool].parameters if tool in TOOLS else {}
    return [name for name in schema.get("required", []) if name not in args]
