"""Processes load only what they use: a `vouch keys` command in a script does not pay for the web app or the
Socket.IO client, and a worker running the offline agent does not load the model providers' SDKs (seconds of
imports and tens of MB each)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

HEAVY = ("quart", "socketio", "pydantic_ai", "openai", "anthropic")


def _loaded_after(code: str) -> set[str]:
    """Which of HEAVY a fresh interpreter has imported after running `code`."""
    probe = f"{code}\nimport json, sys\nprint(json.dumps(sorted(m for m in {HEAVY!r} if m in sys.modules)))"
    done = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return set(json.loads(done.stdout.splitlines()[-1]))


def test_operator_commands_load_neither_the_web_app_nor_the_socketio_client() -> None:
    run = "from api.cli import main\nmain(['keys', 'create', '--help'], standalone_mode=False)"
    assert _loaded_after(run) == set()


def test_caller_commands_load_the_socketio_client_only_to_follow() -> None:
    run = "from api.cli import main\nmain(['tasks', 'status', '--help'], standalone_mode=False)"
    assert _loaded_after(run) == set()
    assert "socketio" in _loaded_after("from vouch_client.live import follow")


def test_a_worker_loads_no_model_provider_until_a_model_runs() -> None:
    assert _loaded_after("import agents.worker, api.app") == {"quart"}
    assert {"pydantic_ai", "openai"} <= _loaded_after(
        "from agents.providers import ModelRegistry\nfrom core.settings import Settings\n"
        "settings = Settings(data_dir='.', database_url='sqlite://', secret_key=b'x' * 40, agent_base_url='http://127.0.0.1:9')\n"
        "ModelRegistry(settings).get('openai:m')"
    )
