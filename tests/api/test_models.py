"""GET /api/eval/models and a task's `agentModel` (issue 20.6): what a key may choose, and a name it may not."""

from __future__ import annotations

import json

import pytest

from core.model_profiles import ModelProfile
from core.settings import Settings
from tests.api.helpers import CREATE, account, assert_problem, create, create_ok, get_status, task
from tests.conftest import Service, bearer

MODELS = "/api/eval/models"
LOCAL = ModelProfile(
    name="local",
    provider="openai",
    model="llama3.1:8b",
    base_url="http://10.1.2.3:11434/v1",
    api_key_env="OLLAMA_API_KEY",
    temperature=0.2,
    max_tokens=2048,
    input_usd_per_mtok=0.0,
    output_usd_per_mtok=0.0,
)
CLAUDE = ModelProfile(name="claude", provider="anthropic", model="claude-3-5-haiku-latest")


@pytest.fixture
def settings(settings: Settings) -> Settings:
    return settings.with_changes(model_profiles=(LOCAL, CLAUDE), agent_model="local")


async def test_the_models_a_key_may_choose_are_listed_without_keys_or_addresses(
    api_only: Service, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OLLAMA_API_KEY", "sk-secret-never-shown")
    reader = await account(api_only, "reader@example.com", "eval:read")
    response = await api_only.client.get(MODELS, headers=bearer(reader.key))
    payload = await response.get_json()
    assert response.status_code == 200, payload
    assert "RateLimit" in response.headers  # charged like every keyed request
    assert payload == {
        "default": "local",
        "profiles": [
            {
                "name": "local",
                "provider": "openai",
                "model": "llama3.1:8b",
                "temperature": 0.2,
                "maxTokens": 2048,
                "inputUsdPerMtok": 0.0,
                "outputUsdPerMtok": 0.0,
            },
            {
                "name": "claude",
                "provider": "anthropic",
                "model": "claude-3-5-haiku-latest",
                "temperature": None,
                "maxTokens": None,
                "inputUsdPerMtok": None,
                "outputUsdPerMtok": None,
            },
        ],
        "otherChoices": ["offline", "openai:<model>", "anthropic:<model>"],
    }
    text = json.dumps(payload)
    assert "sk-secret" not in text and "OLLAMA_API_KEY" not in text and "10.1.2.3" not in text


async def test_a_task_may_name_a_profile(api_only: Service) -> None:
    caller = await account(api_only, "caller@example.com", "eval:manage")
    execution_id = await create_ok(api_only, caller.key, task(agentModel="claude"))
    assert (await get_status(api_only, caller.key, execution_id))["agentModel"] == "claude"
    default = await create_ok(api_only, caller.key, task())
    assert (await get_status(api_only, caller.key, default))["agentModel"] == "local"


@pytest.mark.parametrize("name", ["gpt4", "mistral:large", "openai:", "Local"])
async def test_an_unknown_model_is_a_422_listing_the_valid_ones(api_only: Service, name: str) -> None:
    caller = await account(api_only, "caller@example.com", "eval:manage")
    response = await api_only.client.post(CREATE, json=task(agentModel=name), headers=bearer(caller.key))
    payload = await response.get_json()
    assert_problem(response, payload, 422, "validation_failed")
    [error] = payload["errors"]
    assert error["pointer"] == "/agentModel"
    for valid in ("local", "claude", "'offline'", "'openai:<model>'", "'anthropic:<model>'"):
        assert valid in error["detail"], error
    assert repr(name) in error["detail"]
    status, _ = await create(api_only, caller.key, task(agentModel="offline"))
    assert status == 201
