"""Model profiles at work (issue 20.6): a task names a profile, the real OpenAI or Anthropic client talks to a local
server of that wire format with the profile's base URL, key, temperature and output limit, and each request's
cost comes from the profile's prices, else from genai-prices, else is unknown (null, never a made-up 0)."""

from __future__ import annotations

from typing import Any

import pytest
from genai_prices import Usage, calc_price

from core.db import Database
from core.metrics import execution_metrics
from core.model_profiles import ModelProfile
from core.models import Execution
from core.settings import Settings
from tests.agents.test_runner import claim_and_run, new_execution, snapshot
from tests.support.fake_llm import call, fake_llm

KEY_VARIABLE = "VOUCH_TEST_PROFILE_KEY"


def with_profiles(settings: Settings, *profiles: ModelProfile) -> Settings:
    return settings.with_changes(model_profiles=profiles, agent_request_retries=0)


async def metrics_of(db: Database, execution_id: str) -> dict[str, Any]:
    async with db.reading() as session:
        return await execution_metrics(session, await session.get_one(Execution, execution_id))


async def test_an_anthropic_profile_runs_a_task_with_its_key_settings_and_prices(
    db: Database, settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Nothing from the provider's usual variables: everything comes from the profile.
    for name in ("ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL", "ANTHROPIC_AUTH_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv(KEY_VARIABLE, "key-from-the-profile-variable")
    async with fake_llm(call("write_file", path="a.md", content="hi"), call("finish", summary="wrote a.md")) as llm:
        profile = ModelProfile(
            name="claude-local",
            provider="anthropic",
            model="claude-3-5-haiku-latest",  # genai-prices knows it: the profile's prices must win
            base_url=llm.root,
            api_key_env=KEY_VARIABLE,
            temperature=0.3,
            max_tokens=512,
            input_usd_per_mtok=3.0,
            output_usd_per_mtok=15.0,
        )
        config = with_profiles(settings, profile)
        exe = await new_execution(db, config, "Write a.md.", agent_model="claude-local")
        await claim_and_run(db, config)
        snap = await snapshot(db, exe)
        assert snap.execution.status == "completed", snap.execution.error
        assert snap.execution.result == {"summary": "wrote a.md", "output": "wrote a.md", "toolCalls": ["write_file"]}
        assert len(llm.requests) == 2
        for body, headers in zip(llm.requests, llm.headers, strict=True):
            assert body["model"] == "claude-3-5-haiku-latest"
            assert (body["temperature"], body["max_tokens"]) == (0.3, 512)
            # The version that takes a temperature, whatever the SDK's default.
            assert headers.get("anthropic-version") == "2023-06-01"
            # The SDK sends it as `x-api-key` or, in newer versions, as a bearer token.
            sent = (headers.get("x-api-key"), headers.get("authorization", "").removeprefix("Bearer "))
            assert "key-from-the-profile-variable" in sent, sorted(headers)
        usage = snap.payloads("model.request")
        # 100 tokens in at $3/M and 20 out at $15/M per request (the fake's usage).
        each = (100 * 3.0 + 20 * 15.0) / 1_000_000
        assert [(u["inputTokens"], u["outputTokens"]) for u in usage] == [(100, 20)] * 2
        assert [u["costUsd"] for u in usage] == [pytest.approx(each)] * 2
        metrics = await metrics_of(db, exe)
        assert (metrics["inputTokens"], metrics["outputTokens"]) == (200, 40)
        assert metrics["costUsd"] == pytest.approx(2 * each)


async def test_an_openai_profile_sends_its_temperature_and_output_limit_to_a_local_server(
    db: Database, settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    async with fake_llm(call("finish", summary="done")) as llm:
        profile = ModelProfile("local", "openai", "llama3.1:8b", base_url=llm.base_url, temperature=0.2, max_tokens=77)
        config = with_profiles(settings, profile)
        exe = await new_execution(db, config, "Say done.", agent_model="local")
        await claim_and_run(db, config)
        snap = await snapshot(db, exe)
        assert snap.execution.status == "completed", snap.execution.error
        [body] = llm.requests
        assert body["model"] == "llama3.1:8b"
        assert body["temperature"] == 0.2
        # Local OpenAI-compatible servers (Ollama, vLLM, llama.cpp, LM Studio) all read `max_tokens`.
        assert body["max_tokens"] == 77 and "max_completion_tokens" not in body
        # No prices in the profile and a model genai-prices does not know: unknown, not 0.
        assert [u["costUsd"] for u in snap.payloads("model.request")] == [None]
        assert (await metrics_of(db, exe))["costUsd"] is None


async def test_a_known_model_without_profile_prices_is_priced_by_genai_prices(
    db: Database, settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    async with fake_llm(call("finish", summary="done"), call("finish", summary="done")) as llm:
        config = with_profiles(settings, ModelProfile("four", "openai", "gpt-4o", base_url=llm.base_url))
        config = config.with_changes(agent_base_url=llm.base_url)
        price = calc_price(Usage(input_tokens=100, output_tokens=20), "gpt-4o", provider_id="openai")
        expected = float(price.total_price)
        assert expected > 0
        for name in ("four", "openai:gpt-4o"):
            exe = await new_execution(db, config, "Say done.", agent_model=name)
            await claim_and_run(db, config)
            snap = await snapshot(db, exe)
            assert snap.execution.status == "completed", snap.execution.error
            assert [u["costUsd"] for u in snap.payloads("model.request")] == [pytest.approx(expected)], name
            assert (await metrics_of(db, exe))["costUsd"] == pytest.approx(expected)


async def test_a_profile_whose_key_variable_is_unset_fails_the_execution_clearly(
    db: Database, settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(KEY_VARIABLE, raising=False)
    profile = ModelProfile("hosted", "openai", "gpt-4o", api_key_env=KEY_VARIABLE)
    config = with_profiles(settings, profile)
    exe = await new_execution(db, config, "Say done.", agent_model="hosted")
    await claim_and_run(db, config)
    snap = await snapshot(db, exe)
    assert snap.execution.status == "failed"
    assert snap.execution.error is not None and f"set {KEY_VARIABLE}" in snap.execution.error
