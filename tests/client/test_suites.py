"""Suites from the client and from `vouch suites …` against a real server and worker: the calls, the CLI's exit
codes a CI job gates on (the pass rate per model, a model with no scored run, a cancelled suite), and its errors."""

from __future__ import annotations

import asyncio
import csv
import io
import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from inspect_ai.log import read_eval_log_async
from vouch_client import AsyncClient, Client, Conflict, NotFound, Suite

from tests.client.conftest import OWNER, Vouch, make_accounts, plain_task, reviewed_task
from tests.support.processes import VOUCH
from tests.support.waiting import until

PASSES = [{"type": "regex", "pattern": "."}]  # the agent's summary is never empty
FAILS = [{"type": "regex", "pattern": "^no summary reads like this$"}]


def scored(name: str, scorers: list[dict[str, str]] | None) -> dict[str, Any]:
    return {**plain_task(name), **({"scorers": scorers} if scorers is not None else {})}


def suite_file(tmp_path: Path, **body: Any) -> str:
    path = tmp_path / "suite.yaml"
    path.write_text(yaml.safe_dump({"name": "Nightly", "models": ["offline"], **body}))
    return str(path)


def _env(vouch: Vouch) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("VOUCH_") and k != "NO_COLOR"}
    return {**env, "VOUCH_URL": vouch.base, "VOUCH_API_KEY": vouch.owner.key}


def _vouch(vouch: Vouch, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([VOUCH, *args], env=_env(vouch), capture_output=True, text=True, timeout=timeout)


def client_runs(vouch: Vouch, suite_id: str) -> list[Any]:
    with Client(vouch.base, vouch.owner.key) as client:
        return list(client.iter_suite_runs(suite_id))


def suite_when(client: Client, suite_id: str, check: Any, timeout: float = 60) -> Suite:
    async def found() -> Suite | None:
        suite = client.suite(suite_id)
        return suite if check(suite) else None

    return asyncio.run(until(found, timeout=timeout))


def test_run_prints_the_suite_id_and_its_page(vouch: Vouch, tmp_path: Path) -> None:
    path = suite_file(tmp_path, tasks=[scored("One", PASSES), scored("Two", PASSES)], testMode="both")
    done = _vouch(vouch, "suites", "run", path)
    assert done.returncode == 0, done.stderr
    suite_id = done.stdout.strip()
    assert suite_id.startswith("ste") and "\n" not in suite_id
    assert done.stderr.strip() == f"Suite Nightly: 4 runs · {vouch.base}/suites/{suite_id}"
    with Client(vouch.base, vouch.owner.key) as client:
        suite = client.suite(suite_id)
    assert (suite.name, suite.progress.total, suite.testMode) == ("Nightly", 4, "both")
    assert sorted((run.taskName, run.testMode) for run in client_runs(vouch, suite_id)) == [
        ("One", "with-verification"), ("One", "without-verification"),
        ("Two", "with-verification"), ("Two", "without-verification"),
    ]  # fmt: skip


def test_watch_gates_on_the_pass_rate_of_every_model(vouch: Vouch, tmp_path: Path) -> None:
    # One task passes and one fails in each mode: 50 % each. At 0.5 the gate opens, at 0.6 it does not.
    path = suite_file(tmp_path, tasks=[scored("Right", PASSES), scored("Wrong", FAILS)], testMode="both")
    done = _vouch(vouch, "suites", "run", path, "--watch", "--min-pass-rate", "0.5")
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith("Suite Nightly: 4 runs · ")
    suite_id = lines[0].split("/suites/")[1]
    assert "\x1b[" not in done.stdout  # no colour, and no redrawing, into a pipe
    assert lines[1].startswith("Suite Nightly [running] · ") and "finished" in lines[1]
    table_at = lines.index(next(line for line in lines if line.startswith("MODEL")))
    assert lines[table_at].split() == ["MODEL", "MODE", "RUNS", "PASS", "RATE", "(95%", "CI)", "INTERVENTION",
                                       "REVIEW", "WAIT", "P50", "COST"]  # fmt: skip
    rows = [line.split() for line in lines[table_at + 1 : table_at + 3]]
    # The Wilson interval of 1 of 2: 9 % to 91 %.
    assert [row[:7] for row in rows] == [
        ["offline", "with-verification", "2/2", "50%", "[9-91%]", "of", "2"],
        ["offline", "without-verification", "2/2", "50%", "[9-91%]", "of", "2"],
    ]
    assert "✓ offline (with-verification): pass rate 50.0% ≥ 50.0%" in lines
    assert "✓ offline (without-verification): pass rate 50.0% ≥ 50.0%" in lines

    above = _vouch(vouch, "suites", "watch", suite_id, "--min-pass-rate", "0.6")
    assert above.returncode == 1, above.stdout + above.stderr
    assert "✗ offline (with-verification): pass rate 50.0% < 60.0%" in above.stdout
    assert "✗ offline (without-verification): pass rate 50.0% < 60.0%" in above.stdout
    # Without a minimum there is nothing to gate: a completed suite exits 0.
    assert _vouch(vouch, "suites", "watch", suite_id).returncode == 0


def test_a_model_with_no_scored_run_fails_even_a_zero_pass_rate(vouch: Vouch, tmp_path: Path) -> None:
    path = suite_file(tmp_path, tasks=[scored("Unscored", None)], repeats=2)
    done = _vouch(vouch, "suites", "run", path, "--watch", "--min-pass-rate", "0")
    assert done.returncode == 1, done.stdout + done.stderr
    assert "✗ offline (without-verification): no scored run, so no pass rate to check" in done.stdout
    assert "— (none scored)" in done.stdout


def test_a_cancelled_suite_exits_3_and_cannot_be_cancelled_again(vouch: Vouch, tmp_path: Path) -> None:
    path = suite_file(tmp_path, tasks=[reviewed_task(OWNER), scored("Quick", PASSES)], testMode="with-verification")
    watching = subprocess.Popen(
        [VOUCH, "suites", "run", path, "--watch", "--min-pass-rate", "0.5"],
        env=_env(vouch), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert watching.stdout is not None
    suite_id = watching.stdout.readline().strip().split("/suites/")[1]
    with Client(vouch.base, vouch.owner.key) as client:
        waiting = lambda s: any(r.status == "awaiting_review" for r in client.iter_suite_runs(s.suiteId))  # noqa: E731
        suite_when(client, suite_id, waiting)
        cancelled = _vouch(vouch, "suites", "cancel", suite_id)
        assert cancelled.returncode == 0 and cancelled.stdout.strip() == f"{suite_id} cancelled"
        out, err = watching.communicate(timeout=60)
        assert watching.returncode == 3, out + err
        assert "✓ offline" not in out  # no gate for a suite that never finished
        assert "The suite was cancelled" in out
        with pytest.raises(Conflict) as refused:
            client.cancel_suite(suite_id)
        assert refused.value.code == "suite_finished"
    again = _vouch(vouch, "suites", "cancel", suite_id)
    assert again.returncode == 5 and again.stderr.startswith("vouch: suite_finished: ")


def test_bad_files_and_refused_suites_have_their_exit_codes(vouch: Vouch, tmp_path: Path) -> None:
    missing = tmp_path / "missing.yaml"
    missing.write_text(yaml.safe_dump({"name": "No models", "tasks": [plain_task()]}))
    local = _vouch(vouch, "suites", "run", str(missing))
    assert local.returncode == 64 and local.stderr == f"vouch: {missing}: models: Field required\n"
    alone = _vouch(vouch, "suites", "run", str(missing), "--min-pass-rate", "0.9")
    assert alone.returncode == 64 and "--min-pass-rate and --timeout go with --watch" in alone.stderr
    # Valid here, refused there: the server names the task.
    path = suite_file(tmp_path, tasks=[plain_task(), {**plain_task(), "assignedReviewer": "not an address"}])
    refused = _vouch(vouch, "suites", "run", path)
    assert refused.returncode == 5 and refused.stderr.startswith("vouch: ") and "tasks[1]" in refused.stderr


async def test_the_async_client_lists_pages_and_hides_another_users_suites(vouch: Vouch) -> None:
    other = (await make_accounts(vouch.settings, ("other@example.com", ("eval:manage",))))[0]
    async with AsyncClient(vouch.base, vouch.owner.key) as client, AsyncClient(vouch.base, other.key) as stranger:
        made = [
            await client.create_suite({"name": f"Suite {n}", "tasks": [plain_task()], "models": ["offline"]})
            for n in range(3)
        ]
        assert [m.runs for m in made] == [1, 1, 1] and all(m.url.endswith(f"/suites/{m.suiteId}") for m in made)
        first = await client.suites(limit=2)
        assert [s.name for s in first.suites] == ["Suite 2", "Suite 1"] and first.nextCursor is not None
        assert [s.name async for s in client.iter_suites(page_size=2)] == ["Suite 2", "Suite 1", "Suite 0"]
        assert (await stranger.suites()).suites == []
        with pytest.raises(NotFound):
            await stranger.suite(made[0].suiteId)
        with pytest.raises(NotFound):
            await stranger.cancel_suite(made[0].suiteId)
        # One Idempotency-Key, one suite: a resent create answers the first.
        body = {"name": "Once", "tasks": [plain_task()], "models": ["offline"]}
        once = await client.create_suite(body, idempotency_key="suite-once")
        twice = await client.create_suite(body, idempotency_key="suite-once")
        assert once.suiteId == twice.suiteId
        assert [s.name async for s in client.iter_suites()].count("Once") == 1


def test_exports_arrive_through_the_client_and_the_cli(vouch: Vouch, tmp_path: Path) -> None:
    path = suite_file(tmp_path, tasks=[scored("Right", PASSES), scored("Wrong", FAILS)], testMode="both")
    done = _vouch(vouch, "suites", "run", path, "--watch")
    assert done.returncode == 0, done.stdout + done.stderr
    suite_id = done.stdout.splitlines()[0].split("/suites/")[1]
    with Client(vouch.base, vouch.owner.key) as client:
        suite = client.suite(suite_id)
        runs = list(client.iter_suite_runs(suite_id, page_size=3))  # two pages
        assert [run.executionId for run in client.suite_runs(suite_id).runs] == [run.executionId for run in runs]
        expected = [(run.executionId, run.taskName, run.testMode, run.status, run.passed) for run in runs]
        assert len(expected) == 4 and suite.status == "completed"
        jsonl = client.export_suite(suite_id)
        assert (jsonl.media_type, jsonl.filename) == ("application/jsonl", f"{suite_id}.jsonl")
        records = [json.loads(line) for line in jsonl.content.decode().splitlines()]
        assert [
            (r["executionId"], r["taskName"], r["testMode"], r["status"], r["verdict"]["passed"]) for r in records
        ] == expected
        table = client.export_suite(suite_id, "csv")
        assert (table.media_type, table.filename) == ("text/csv", f"{suite_id}.csv")
        rows = list(csv.DictReader(io.StringIO(table.content.decode(), newline="")))
        assert [(r["executionId"], r["passed"]) for r in rows] == [
            (execution_id, "true" if passed else "false") for execution_id, *_, passed in expected
        ]
        with pytest.raises(NotFound):
            client.export_suite("ste_nothing_here", "csv")
    # The CLI: to a file (a line on stderr says so) and to stdout.
    target = tmp_path / "suite.eval"
    written = _vouch(vouch, "suites", "export", suite_id, "--format", "inspect", "-o", str(target))
    assert written.returncode == 0, written.stderr
    assert written.stderr.strip() == f"{target.stat().st_size} bytes to {target}"
    log = asyncio.run(read_eval_log_async(str(target)))
    assert log.samples is not None
    assert sorted(s.metadata["executionId"] for s in log.samples) == sorted(str(e[0]) for e in expected)
    printed = _vouch(vouch, "suites", "export", suite_id, "--format", "csv")
    assert printed.returncode == 0, printed.stderr
    printed_rows = csv.DictReader(io.StringIO(printed.stdout, newline=""))
    assert [r["executionId"] for r in printed_rows] == [e[0] for e in expected]
    missing = _vouch(vouch, "suites", "export", "ste_nothing_here")
    assert missing.returncode != 0 and missing.stderr.startswith("vouch: not_found: ")
