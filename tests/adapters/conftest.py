"""A real Vouch (web app and worker on a free port) for the adapters, as for the client's own tests, and the
OpenAI Agents SDK's venv of its own (agent_venv.py says why)."""

from pathlib import Path

import pytest

from tests.adapters.agent_venv import openai_agents_python
from tests.client.conftest import client_settings, vouch

__all__ = ["client_settings", "openai_agents_venv", "vouch"]


@pytest.fixture(scope="session")
def openai_agents_venv() -> Path:
    """The python of a venv with vouch-client[openai-agents] and nothing of the server; made once, and a test
    that needs it errors (never skips) when it cannot be made."""
    return openai_agents_python()
