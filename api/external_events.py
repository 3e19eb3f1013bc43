"""An external agent's events as the service's own: the chat, the metrics and the webhooks read them alike.

`message` is an `agent.message`; `tool_call` a `tool.call` and its `tool.result`; `usage` a `model.request`
priced like the built-in agent's (the operator's profile price, else genai-prices', else unknown).
"""

from __future__ import annotations

from api.external_schemas import ExternalMessageIn, ExternalToolCallIn, ExternalUsageIn
from core.event_payloads import AgentMessage, ModelRequest, ToolCallPayload, ToolResult, TypedEvent
from core.settings import Settings
from core.vocabulary import EventType


def cost_usd(settings: Settings, model: str, input_tokens: int, output_tokens: int) -> float | None:
    profile = settings.model_profile(model)
    cost = profile.cost_usd(input_tokens, output_tokens) if profile is not None else None
    if cost is not None:
        return cost
    provider, _, name = model.partition(":")
    try:
        import genai_prices

        usage = genai_prices.Usage(input_tokens=input_tokens, output_tokens=output_tokens)
        price = genai_prices.calc_price(usage, name or provider, provider_id=provider if name else None)
        return float(price.total_price)
    except (LookupError, ValueError, AssertionError):
        return None  # a model genai-prices does not know: unknown, not 0


def as_events(settings: Settings, sent: ExternalMessageIn | ExternalToolCallIn | ExternalUsageIn) -> list[TypedEvent]:
    """The (type, payload) events one sent event becomes, each naming the agent's key."""
    if isinstance(sent, ExternalMessageIn):
        message: AgentMessage = {"text": sent.text, "key": sent.key}
        return [(EventType.AGENT_MESSAGE, message)]
    if isinstance(sent, ExternalToolCallIn):
        call: ToolCallPayload = {
            "toolCallId": sent.key,
            "tool": sent.tool,
            "args": sent.args,
            "actsOnWorld": None,
            "key": sent.key,
        }
        result: ToolResult = (
            {"toolCallId": sent.key, "tool": sent.tool, "error": sent.error, "durationMs": sent.durationMs}
            if sent.error is not None
            else {"toolCallId": sent.key, "tool": sent.tool, "result": sent.result, "durationMs": sent.durationMs}
        )
        return [(EventType.TOOL_CALL, call), (EventType.TOOL_RESULT, result)]
    usage: ModelRequest = {
        "model": sent.model,
        "inputTokens": sent.inputTokens,
        "outputTokens": sent.outputTokens,
        "costUsd": cost_usd(settings, sent.model, sent.inputTokens, sent.outputTokens),
        "durationMs": sent.durationMs,
        "toolCalls": 0,
        "key": sent.key,
    }
    return [(EventType.MODEL_REQUEST, usage)]
