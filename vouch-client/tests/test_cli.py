"""`vouch-client tasks …` / `vouch-client checkpoints …`, the installed command, against a scripted server:
what it sends, what it prints, and the exit codes a CI job gates on."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import yaml
from stub_http import Reply, Stub, problem, status_record

KEY = "svc_eval_" + "k" * 32
COMMAND = str(Path(sys.executable).with_name("vouch-client"))


def _run(stub: Stub | None, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    env = {name: value for name, value in os.environ.items() if not name.startswith("VOUCH_")}
    if stub is not None:
        env |= {"VOUCH_URL": stub.base, "VOUCH_API_KEY": KEY}
    return subprocess.run([COMMAND, *args], env=env, input=stdin, capture_output=True, text=True, timeout=60)


def test_the_command_offers_the_callers_groups() -> None:
    shown = _run(None, "--help")
    assert shown.returncode == 0, shown.stderr
    assert "tasks" in shown.stdout and "checkpoints" in shown.stdout
    unknown = _run(None, "task")
    assert unknown.returncode == 64 and "No such command 'task'" in unknown.stderr


def test_create_sends_the_file_as_written_and_prints_the_id(stub: Stub, tmp_path: Path) -> None:
    created = {"success": True, "executionId": "exe_7", "chatUrl": "http://vouch.example/chat/exe_7"}
    stub.on("POST", "/api/eval/create-task-agent", Reply(201, created))
    task = {
        "taskName": "Note",
        "taskDescription": "Write it",
        "testMode": "without-verification",
        "agentModel": "offline",
    }
    path = tmp_path / "task.yaml"
    path.write_text(yaml.safe_dump(task))
    done = _run(stub, "tasks", "create", "--file", str(path), "--idempotency-key", "job-42")
    assert done.returncode == 0, done.stderr
    assert done.stdout == "exe_7\n"
    [seen] = stub.seen
    assert seen.body == task and seen.headers["Idempotency-Key"] == "job-42"
    # JSON on stdin reads the same.
    assert _run(stub, "tasks", "create", "--file", "-", stdin=json.dumps(task)).stdout == "exe_7\n"


def test_status_and_wait_print_the_record_and_exit_by_outcome(stub: Stub) -> None:
    failed = status_record(status="failed", error={"code": "tool_failed", "detail": "disk full"})
    stub.on("GET", "/api/eval/status/exe_1", Reply(200, failed))
    shown = _run(stub, "tasks", "status", "exe_1")
    assert shown.returncode == 0  # status reports; it does not gate
    assert shown.stdout.splitlines()[0] == "exe_1  failed  Release note"
    assert "  error: tool_failed: disk full" in shown.stdout.splitlines()
    as_json = _run(stub, "tasks", "status", "exe_1", "--json")
    assert json.loads(as_json.stdout)["error"]["code"] == "tool_failed"
    waited = _run(stub, "tasks", "wait", "exe_1")
    assert (waited.returncode, waited.stdout) == (1, "failed\n")


def test_a_decision_with_changed_arguments(stub: Stub) -> None:
    path = "/api/eval/executions/exe_1/checkpoints/cp_1/decision"
    decision = {"decision": "approve", "by": "rita@example.com", "via": "api", "at": "2026-01-02T03:04:05Z"}
    answer = {"success": True, "executionId": "exe_1", "checkpointId": "cp_1", "decision": decision}
    stub.on("POST", path, Reply(200, {**answer, "decision": {**decision, "editedArgs": {"subject": "v2 (final)"}}}))
    done = _run(stub, "checkpoints", "decide", "exe_1", "cp_1", "approve", "--set", "subject=v2 (final)")
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["cp_1 approve by rita@example.com via api", "  subject changed to 'v2 (final)'"]
    assert stub.seen[0].body == {"decision": "approve", "comment": "", "editedArgs": {"subject": "v2 (final)"}}


def test_usage_errors_exit_64_before_any_request(stub: Stub, tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("taskName: only a name\n")
    invalid = _run(stub, "tasks", "create", "--file", str(bad))
    assert invalid.returncode == 64 and invalid.stderr == f"vouch: {bad}: taskDescription: Field required\n"
    unexplained = _run(stub, "checkpoints", "decide", "exe_1", "cp_1", "reject")
    assert unexplained.returncode == 64 and "a rejection needs --comment" in unexplained.stderr
    malformed = _run(stub, "checkpoints", "decide", "exe_1", "cp_1", "approve", "--set", "subject")
    assert malformed.returncode == 64 and "--set takes NAME=VALUE" in malformed.stderr
    nowhere = _run(None, "tasks", "status", "exe_1")
    assert nowhere.returncode == 64 and "no server address" in nowhere.stderr
    assert stub.seen == []


def test_a_refusal_exits_5_and_an_unreachable_server_6(stub: Stub) -> None:
    stub.on("POST", "/api/eval/executions/exe_1/cancel", problem(409, "execution_finished", "it has finished"))
    refused = _run(stub, "tasks", "cancel", "exe_1")
    assert (refused.returncode, refused.stderr) == (5, "vouch: execution_finished: it has finished\n")
    nowhere = _run(stub, "tasks", "--url", "http://127.0.0.1:9", "status", "exe_1")
    assert nowhere.returncode == 6 and nowhere.stderr.startswith("vouch: cannot reach http://127.0.0.1:9")
