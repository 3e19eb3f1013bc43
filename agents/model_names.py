"""Agent model names, checked without loading any provider SDK (the web process checks them on create)."""

from __future__ import annotations

OFFLINE = "offline"
PROVIDERS = ("openai", "anthropic")


class ModelUnavailable(Exception):
    """The model name cannot be run here: unknown provider, or its key is missing."""


class ProviderFailed(Exception):
    """The model provider could not answer (after the SDK's retries); the message says why."""


def check_model_name(name: str) -> None:
    """Refuse a malformed name before an execution is created with it."""
    if name == OFFLINE:
        return
    provider, _, model = name.partition(":")
    if provider not in PROVIDERS or not model:
        raise ModelUnavailable(f"agent model must be 'offline', 'openai:<model>' or 'anthropic:<model>', not {name!r}")
