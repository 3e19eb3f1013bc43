"""A task the rule-based agent cannot do, as a CI job sees it: the client's coded error, the CLI's lines and
exit code, and examples/ci_gate.py failing the job (it passed on undone work when such runs ended `completed`)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from vouch_client import Client

from tests.client.conftest import Vouch
from tests.client.helpers import status_when_sync
from tests.support.processes import VOUCH

ROOT = Path(__file__).parents[2]
VAGUE = {
    "taskName": "Vague",
    "taskDescription": "Classify the sentiment of 3 reviews and send the result to team@example.com.",
    "testMode": "without-verification",
}
# examples/ci_gate.py with another task: the gate's own logic, run as CI runs it.
GATE_WITH_TASK = (
    "import json, runpy, sys; sys.path.insert(0, {root!r}); "
    "gate = runpy.run_path({path!r}, run_name='gate'); "
    "gate['TASK'].clear(); gate['TASK'].update(json.loads({task!r})); "
    "sys.exit(gate['main']())"
)


def _env(vouch: Vouch) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("VOUCH_")}
    return {**env, "VOUCH_URL": vouch.base, "VOUCH_API_KEY": vouch.owner.key}


def test_the_client_reads_the_coded_error_and_the_agent(vouch: Vouch) -> None:
    with Client(vouch.base, vouch.owner.key) as client:
        created = client.create_task(VAGUE)
        final = status_when_sync(client, created.executionId, "failed", "completed")
    assert final.status == "failed"
    assert final.error is not None and final.error.code == "task_not_understood"
    # "send the result": a mail whose body the agent would have to make up.
    assert final.error.instructions == ["Classify the sentiment of 3 reviews", "send the result to team@example.com"]
    assert final.agent is not None and (final.agent.model, final.agent.kind) == ("offline", "rule-based")
    assert final.metrics.steps == 0

    shown = subprocess.run(
        [VOUCH, "tasks", "status", created.executionId], env=_env(vouch), capture_output=True, text=True, timeout=60
    )
    assert shown.returncode == 0, shown.stderr
    assert "  agent: offline (rule-based)" in shown.stdout
    assert "  error: task_not_understood: The rule-based offline agent" in shown.stdout
    assert "    not understood: Classify the sentiment of 3 reviews" in shown.stdout
    waited = subprocess.run(
        [VOUCH, "tasks", "wait", created.executionId], env=_env(vouch), capture_output=True, text=True, timeout=60
    )
    assert (waited.returncode, waited.stdout) == (1, "failed\n")


def test_the_ci_gate_fails_on_a_task_not_understood_and_passes_its_own(vouch: Vouch) -> None:
    gate = str(ROOT / "examples" / "ci_gate.py")
    own = subprocess.run([sys.executable, gate], env=_env(vouch), capture_output=True, text=True, timeout=120)
    assert own.returncode == 0, own.stdout + own.stderr
    assert own.stdout.splitlines()[1].startswith("completed: 2 steps")
    script = GATE_WITH_TASK.format(root=str(ROOT), path=gate, task=json.dumps(VAGUE))
    vague = subprocess.run([sys.executable, "-c", script], env=_env(vouch), capture_output=True, text=True, timeout=120)
    assert vague.returncode == 1, vague.stdout + vague.stderr
    assert "failed: 0 steps" in vague.stdout
