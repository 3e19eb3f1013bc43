"""Model providers, chosen by name: `offline`, an operator's profile, `openai:<model>`, `anthropic:<model>`.

A profile (core/model_profiles.py) says everything itself: provider, model, base URL, the variable holding its key,
temperature, output limit. `openai:<model>` talks to any OpenAI-compatible server when a base URL is set
(VOUCH_AGENT_BASE_URL, else the provider's own OPENAI_BASE_URL): Ollama, vLLM, llama.cpp, a LiteLLM proxy. Keys
come from the providers' usual variables (OPENAI_API_KEY, ANTHROPIC_API_KEY) unless a profile names another. The
provider SDKs retry timeouts, 429s and 5xx answers with backoff (honouring Retry-After) up to
`agent_request_retries` times.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from agents.model_names import ModelUnavailable, check_model_name
from core.model_profiles import ModelProfile
from core.settings import Settings

if TYPE_CHECKING:
    from anthropic import AsyncAnthropic
    from openai import AsyncOpenAI
    from pydantic_ai.models import Model
    from pydantic_ai.settings import ModelSettings

# Local OpenAI-compatible servers take any key; the SDKs insist on one.
_ANY_KEY = "not-needed"
# The last Anthropic Messages API version that takes `temperature`.
_SAMPLING_API_VERSION = "2023-06-01"


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
        check_model_name(name, self.settings.model_profiles)
        profile = self.settings.model_profile(name)
        hint = "give the profile a base_url for a local server"
        if profile is None:
            provider, _, model_name = name.partition(":")
            base_url = None
            if provider == "openai":
                base_url = self.settings.agent_base_url or os.environ.get("OPENAI_BASE_URL") or None
            # Not a profile the operator wrote: the service-wide settings and the provider's own variables.
            profile = ModelProfile(name=name, provider=provider, model=model_name, base_url=base_url)
            hint = "VOUCH_AGENT_BASE_URL for a local server" if provider == "openai" else ""
        if profile.provider == "openai":
            return self._openai(profile, hint)
        return self._anthropic(profile, hint)

    def _openai(self, profile: ModelProfile, hint: str) -> Model:
        from openai import AsyncOpenAI
        from pydantic_ai.models.openai import OpenAIChatModel
        from pydantic_ai.profiles.openai import OpenAIModelProfile
        from pydantic_ai.providers.openai import OpenAIProvider

        api_key = _api_key(profile, "OPENAI_API_KEY", hint)
        client = AsyncOpenAI(
            base_url=profile.base_url,
            api_key=api_key,
            timeout=self.settings.agent_request_timeout_seconds,
            max_retries=self.settings.agent_request_retries,
        )
        self._clients.append(client)
        # OpenAI's own API calls the output limit `max_completion_tokens`; the servers that speak its wire format
        # (Ollama, vLLM, llama.cpp, LM Studio) read `max_tokens`.
        host = urlsplit(profile.base_url).hostname if profile.base_url else "api.openai.com"
        openai_itself = host == "api.openai.com"
        wire = None if openai_itself else OpenAIModelProfile(openai_chat_supports_max_completion_tokens=False)
        return OpenAIChatModel(
            profile.model,
            provider=OpenAIProvider(openai_client=client),
            profile=wire,
            settings=_model_settings(profile),
        )

    def _anthropic(self, profile: ModelProfile, hint: str) -> Model:
        from anthropic import AsyncAnthropic
        from pydantic_ai.models.anthropic import AnthropicModel
        from pydantic_ai.providers.anthropic import AnthropicProvider

        api_key = _api_key(profile, "ANTHROPIC_API_KEY", hint)
        client = AsyncAnthropic(
            base_url=profile.base_url,
            api_key=api_key,
            timeout=self.settings.agent_request_timeout_seconds,
            max_retries=self.settings.agent_request_retries,
            # The API version the SDK sends by default (2026-10-21 from anthropic 2) takes no temperature, and
            # pydantic-ai would drop the profile's with a warning: the profile asked for one, so it is sent, with
            # the version that takes it (pydantic-ai's advice).
            default_headers=None if profile.temperature is None else {"anthropic-version": _SAMPLING_API_VERSION},
        )
        self._clients.append(client)
        return AnthropicModel(
            profile.model, provider=AnthropicProvider(anthropic_client=client), settings=_model_settings(profile)
        )


def _api_key(profile: ModelProfile, usual: str, hint: str) -> str:
    """The key from the profile's variable, else the provider's usual one; a local server needs none."""
    if profile.api_key_env is not None:
        key = os.environ.get(profile.api_key_env)
        if not key:
            raise ModelUnavailable(f"{profile.name}: set {profile.api_key_env} (the profile's api_key_env)")
        return key
    key = os.environ.get(usual)
    if key:
        return key
    if profile.base_url is None:
        raise ModelUnavailable(f"{profile.name}: set {usual}" + (f", or {hint}" if hint else ""))
    return _ANY_KEY


def _model_settings(profile: ModelProfile) -> ModelSettings | None:
    from pydantic_ai.settings import ModelSettings

    settings = ModelSettings()
    if profile.temperature is not None:
        settings["temperature"] = profile.temperature
    if profile.max_tokens is not None:
        settings["max_tokens"] = profile.max_tokens
    return settings or None
