"""GET /api/eval/models: the models a task may name in `agentModel`.

The operator's profiles (core/model_profiles.py) with what a caller needs to choose between them (provider,
model, temperature, output limit, prices), and the other accepted names. Never a key, the variable holding
one, or a base URL: those say how this service reaches its models, which is the operator's business.
"""

from __future__ import annotations

from typing import Any

from quart import Blueprint

from api.auth import require_scope
from core.model_profiles import OFFLINE, PROVIDERS, ModelProfile
from core.web.services import services

blueprint = Blueprint("model_choices", __name__, url_prefix="/api/eval")

OTHER_CHOICES = (OFFLINE, *(f"{provider}:<model>" for provider in PROVIDERS))


def profile_out(profile: ModelProfile) -> dict[str, Any]:
    return {
        "name": profile.name,
        "provider": profile.provider,
        "model": profile.model,
        "temperature": profile.temperature,
        "maxTokens": profile.max_tokens,
        "inputUsdPerMtok": profile.input_usd_per_mtok,
        "outputUsdPerMtok": profile.output_usd_per_mtok,
    }


@blueprint.get("/models")
@require_scope("eval:read")
async def list_models() -> dict[str, Any]:
    settings = services().settings
    return {
        "default": settings.agent_model,
        "profiles": [profile_out(profile) for profile in settings.model_profiles],
        "otherChoices": list(OTHER_CHOICES),
    }
