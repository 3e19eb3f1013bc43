"""Agent model names, checked without loading any provider SDK (the web process checks them on create).

A name is `offline`, one of the operator's profiles (core/model_profiles.py) or `openai:<model>` /
`anthropic:<model>`.
"""

from __future__ import annotations

from core.model_profiles import OFFLINE, PROVIDERS, ModelProfile, model_name_problem

__all__ = ["OFFLINE", "PROVIDERS", "ModelUnavailable", "ProviderFailed", "check_model_name"]


class ModelUnavailable(Exception):
    """The model name cannot be run here: unknown provider or profile, or its key is missing."""


class ProviderFailed(Exception):
    """The model provider could not answer (after the SDK's retries); the message says why."""


def check_model_name(name: str, profiles: tuple[ModelProfile, ...] = ()) -> None:
    """Refuse a name that is neither `offline`, a profile nor `provider:model`, before anything runs with it."""
    problem = model_name_problem(name, profiles)
    if problem is not None:
        raise ModelUnavailable(problem)
