"""Model providers, chosen by name: `offline`, `openai:<model>`, `anthropic:<model>`.

`openai:<model>` talks to any OpenAI-compatible server when a base URL is set (VOUCH_AGENT_BASE_URL,
else the provider's own OPENAI_BASE_URL): Ollama, vLLM, llama.cpp, a LiteLLM proxy. Keys come from the
providers' usual variables (OPENAI_API_KEY, ANTHROPIC_API_KEY). The provider SDKs retry timeouts, 429s
and 5xx answers with backoff (honouring Retry-After) up to `agent_request_retries` times.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from agents.model_names import ModelUnavailable, check_model_name
from core.settings import Settings

if TYPE_CHECKING:
    from anthropic import AsyncAnthropic
    from openai import AsyncOpenAI
    from pydantic_ai.models import Model


class ModelRegistry:
    """One client per model name for the life of a worker, so connections are reused across steps.

    A provider's SDK is imported when its first model is built: together they are seconds of imports and tens of
    MB that a worker running only the offline agent never needs.
    """

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self._models: dict[str, Model] = {}
        self._clients: list[AsyncOpenAI | AsyncAnthropic] = []

    async def aclose(self) -> None:
        """Close every client's connections (a worker stopping, or a runner that made its own registry)."""
        clients, self._clients, self._models = self._clients, [], {}
        for client in clients:
            await client.close()

    def get(self, name: str) -> Model:
        model = self._models.get(name)
        if model is None:
            model = self._models[name] = self._build(name)
        return model

    def _build(self, name: str) -> Model:
        check_model_name(name)
        provider, _, model_name = name.partition(":")
        timeout = self.settings.agent_request_timeout_seconds
        retries = self.settings.agent_request_retries
        if provider == "openai":
            from openai import AsyncOpenAI
            from pydantic_ai.models.openai import OpenAIChatModel
            from pydantic_ai.providers.openai import OpenAIProvider

            base_url = self.settings.agent_base_url or os.environ.get("OPENAI_BASE_URL") or None
            api_key = os.environ.get("OPENAI_API_KEY")
            if api_key is None:
                if base_url is None:
                    raise ModelUnavailable(f"{name}: set OPENAI_API_KEY, or VOUCH_AGENT_BASE_URL for a local server")
                api_key = "not-needed"  # local OpenAI-compatible servers take any key; the SDK insists on one
            openai_client = AsyncOpenAI(base_url=base_url, api_key=api_key, timeout=timeout, max_retries=retries)
            self._clients.append(openai_client)
            return OpenAIChatModel(model_name, provider=OpenAIProvider(openai_client=openai_client))
        from anthropic import AsyncAnthropic
        from pydantic_ai.models.anthropic import AnthropicModel
        from pydantic_ai.providers.anthropic import AnthropicProvider

        api_key = os.environ.get("ANTHROPIC_API_KEY")
        if api_key is None:
            raise ModelUnavailable(f"{name}: set ANTHROPIC_API_KEY")
        anthropic_client = AsyncAnthropic(api_key=api_key, timeout=timeout, max_retries=retries)
        self._clients.append(anthropic_client)
        return AnthropicModel(model_name, provider=AnthropicProvider(anthropic_client=anthropic_client))
