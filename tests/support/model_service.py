"""The web app with its in-process worker, its model agents talking to a local OpenAI-compatible server
(tests/support/fake_llm.py): what a test of real runs of a model agent over the API starts from."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from api.app import create_app
from core.settings import Settings
from tests.conftest import Service
from tests.support.fake_llm import FakeLLM


@asynccontextmanager
async def model_service(settings: Settings, llm: FakeLLM, **changes: Any) -> AsyncIterator[Service]:
    """`settings` pointed at `llm` (no retries: a scripted failure is seen at once), with `changes` on top."""
    config = settings.with_changes(agent_base_url=llm.base_url, agent_request_retries=0, **changes)
    app = create_app(config, run_worker=True)
    async with app.test_app() as test_app:
        yield Service(app, test_app.test_client(), config)
