"""`vouch tasks …` and `vouch checkpoints …` as a CI job runs them: exit codes say how the run ended."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import yaml
from vouch_client import Client

from tests.client.conftest import Vouch, plain_task, reviewed_task
from tests.client.helpers import status_when_sync
from tests.support.processes import VOUCH


def _env(vouch: Vouch) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("VOUCH_")}
    return {**env, "VOUCH_URL": vouch.base, "VOUCH_API_KEY": vouch.owner.key}


def _vouch(vouch: Vouch, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([VOUCH, *args], env=_env(vouch), capture_output=True, text=True, timeout=60)


def _started(vouch: Vouch, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [VOUCH, *args], env=_env(vouch), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def test_create_watch_exits_0_when_completed(vouch: Vouch, tmp_path: Path) -> None:
    task = tmp_path / "task.json"
    task.write_text(json.dumps(plain_task("From CI")))
    done = _vouch(vouch, "tasks", "create", "--file", str(task), "--watch")
    assert done.returncode == 0, done.stderr
    assert "From CI" in done.stdout and "→ write_file" in done.stdout and "■ Completed" in done.stdout
    assert "Result: completed in" in done.stdout and "2 steps" in done.stdout

    execution_id = done.stderr.split("created ")[1].split()[0]
    assert _vouch(vouch, "tasks", "wait", execution_id).stdout == "completed\n"
    shown = _vouch(vouch, "tasks", "status", execution_id, "--json")
    assert shown.returncode == 0 and json.loads(shown.stdout)["status"] == "completed"
    listed = _vouch(vouch, "tasks", "list", "--status", "completed")
    header, row = listed.stdout.splitlines()
    assert header.split() == ["EXECUTION", "STATUS", "CREATED", "TASK"]
    assert row.split()[:2] == [execution_id, "completed"] and row.endswith("  From CI")
    assert "\x1b[" not in listed.stdout  # no colour into a pipe


def test_a_rejected_run_exits_2_and_a_decision_from_the_cli(vouch: Vouch, tmp_path: Path) -> None:
    task = tmp_path / "task.yaml"
    task.write_text(yaml.safe_dump(reviewed_task(maxRevisions=0)))
    created = _vouch(vouch, "tasks", "create", "--file", str(task))
    assert created.returncode == 0, created.stderr
    execution_id = created.stdout.strip()
    watching = _started(vouch, "tasks", "watch", execution_id, "--no-prompt")
    with Client(vouch.base, vouch.owner.key) as client:
        paused = status_when_sync(client, execution_id, "awaiting_review")
        checkpoint = paused.checkpoints[0].checkpointId
    decided = _vouch(vouch, "checkpoints", "decide", execution_id, checkpoint, "reject", "--comment", "not this week")
    assert decided.returncode == 0 and decided.stdout.strip() == f"{checkpoint} reject by {vouch.owner.email} via api"
    out, err = watching.communicate(timeout=60)
    assert watching.returncode == 2, err
    assert "? Checkpoint Send: Send it?" in out and "■ Rejected by caller@example.com: not this week" in out
    assert "✘ rejected by caller@example.com via api: not this week" in out and "✔" not in out

    again = _vouch(vouch, "checkpoints", "decide", execution_id, checkpoint, "approve")
    assert again.returncode == 5 and again.stderr.startswith("vouch: already_decided: ")


def test_a_cancelled_run_exits_3_and_a_timeout_exits_4(vouch: Vouch) -> None:
    with Client(vouch.base, vouch.owner.key) as client:
        execution_id = client.create_task(reviewed_task()).executionId
        status_when_sync(client, execution_id, "awaiting_review")
        timed_out = _vouch(vouch, "tasks", "watch", execution_id, "--timeout", "1")
        assert timed_out.returncode == 4, timed_out.stderr
        assert "awaiting_review" in timed_out.stderr
        watching = _started(vouch, "tasks", "watch", execution_id)
        cancelled = _vouch(vouch, "tasks", "cancel", execution_id)
        assert cancelled.stdout.strip() == f"{execution_id} cancelled"
        out, err = watching.communicate(timeout=60)
    assert watching.returncode == 3, err
    assert "■ Cancelled by caller@example.com" in out


def test_usage_and_api_errors_have_their_own_exit_codes(vouch: Vouch, tmp_path: Path) -> None:
    missing = _vouch(vouch, "tasks", "status")
    assert missing.returncode == 64 and "Missing argument" in missing.stderr
    bad = tmp_path / "bad.yaml"
    bad.write_text("taskName: only a name\n")
    invalid = _vouch(vouch, "tasks", "create", "--file", str(bad))
    assert invalid.returncode == 64 and invalid.stderr.startswith("vouch: ") and "taskDescription" in invalid.stderr
    unknown = _vouch(vouch, "tasks", "status", "exe_unknown")
    assert unknown.returncode == 5 and unknown.stderr == "vouch: not_found: no execution with that id\n"
    nowhere = subprocess.run(
        [VOUCH, "tasks", "--url", "http://127.0.0.1:9", "status", "exe_x"],
        env=_env(vouch), capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert nowhere.returncode == 6 and nowhere.stderr.startswith("vouch: cannot reach http://127.0.0.1:9")


def test_watch_shows_the_whole_action_and_the_cli_approves_it_edited(vouch: Vouch) -> None:
    body = "First words of the note, " + "long " * 60 + "end"
    task = {
        "taskName": "Edited send",
        "taskDescription": f'Send an email to team@example.com with subject "v2" and body "{body}"',
        "testMode": "with-verification",
        "assignedReviewer": vouch.owner.email,
        "autoDetectCheckpoints": True,
    }
    with Client(vouch.base, vouch.owner.key) as client:
        execution_id = client.create_task(task).executionId
        watching = _started(vouch, "tasks", "watch", execution_id, "--no-prompt")
        paused = status_when_sync(client, execution_id, "awaiting_review")
    checkpoint = paused.checkpoints[0]
    assert checkpoint.nextAction is not None and checkpoint.nextAction.args["subject"] == "v2"

    unexplained = _vouch(vouch, "checkpoints", "decide", execution_id, checkpoint.checkpointId, "reject")
    assert unexplained.returncode == 64 and "a rejection needs --comment" in unexplained.stderr  # usage error
    bad = _vouch(vouch, "checkpoints", "decide", execution_id, checkpoint.checkpointId, "approve", "--set", "cc=x@y.z")
    assert bad.returncode != 0 and "editedArgs.cc: is not an argument of send_email" in bad.stderr
    decided = _vouch(
        vouch, "checkpoints", "decide", execution_id, checkpoint.checkpointId, "approve", "--set", "subject=v2 (final)"
    )
    assert decided.returncode == 0, decided.stderr
    assert decided.stdout.splitlines()[1:] == ["  subject changed to 'v2 (final)'"]
    out, err = watching.communicate(timeout=60)
    assert watching.returncode == 0, err
    # Every argument in full under the checkpoint's line, a multi-line value indented under its name.
    assert "  next: send_email" in out, out
    assert f"    to: team@example.com\n    subject: v2\n    body: {body}\n" in out  # in full
    with Client(vouch.base, vouch.owner.key) as client:
        record = client.status(execution_id)
    decision = record.checkpoints[0].decision
    assert decision is not None and decision.editedArgs == {"subject": "v2 (final)"}
