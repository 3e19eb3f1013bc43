"""A suite's exports (issue 23.6): JSON Lines, CSV and an Inspect AI eval log, read back by their own readers.

The runs are real: created through the API, carried out by the in-process worker (the model agent against the local
OpenAI-compatible server, and the offline agent), paused at checkpoints a reviewer decides over the API (an edited
approval with a rating, a rejection with a comment, a grade), and scored by the scorers. The suite around them is
the list of runs the export takes (`ExportRun`), as the suite's route hands it over. JSON Lines and CSV are parsed
back with `json` and `csv`; the Inspect log is read with Inspect's own reader (`inspect_ai.log`).
"""

from __future__ import annotations

import asyncio
import csv
import io
import json
import math
import socket
import subprocess
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from inspect_ai.log import read_eval_log_async, read_eval_log_sample_async, read_eval_log_sample_summaries_async
from inspect_ai.model import ChatMessageAssistant, ChatMessageTool, ChatMessageUser

from api.app import create_app
from core.exports import ExportRun, csv_export, inspect_export, jsonl_export
from core.settings import Settings
from tests.api.helpers import account, create_ok, decide, paused_at, task, wait_for
from tests.conftest import Account, Service, bearer
from tests.support.fake_llm import Answer, FakeLLM, call, fake_llm, last_tool_result
from tests.support.waiting import until

OWNER = "owner@example.com"
REVIEWER = "grader@example.com"
MODEL = "openai:scripted"
MAIL = {"to": "boss@example.com", "subject": "Weekly report", "body": "All green."}
EDITED = {**MAIL, "subject": "Weekly report, edited"}
# A comma, quotes and a line break: the CSV must keep them inside one field.
QUESTION = 'E-mail the weekly report to boss@example.com, then answer:\n"What is the capital of France?"'
NOTE = 'Write a note called plan.md saying "ship it".'
SEND_IT = {"stage": "Send it?", "verificationQuestion": "May the report go to the boss?"}
DRAFT = {"stage": "Draft note", "verificationQuestion": "Write it?"}
REJECTED = "Not to the boss.\nAsk me first."


def scripted(body: dict[str, Any]) -> Answer:
    """Sends the report first; then answers Paris, or Lyon once the reviewer has rejected the mail."""
    if not any(message["role"] == "tool" for message in body["messages"]):
        return Answer(text="Sending the report first.", tool_calls=[("send_email", MAIL)])
    return call("finish", summary="Lyon" if "Rejected" in last_tool_result(body) else "Paris")


@pytest.fixture
async def llm() -> AsyncIterator[FakeLLM]:
    async with fake_llm(then=scripted) as server:
        yield server


@pytest.fixture
async def served(settings: Settings, llm: FakeLLM) -> AsyncIterator[Service]:
    config = settings.with_changes(agent_base_url=llm.base_url, agent_request_retries=0)
    app = create_app(config, run_worker=True)
    async with app.test_app() as test_app:
        yield Service(app, test_app.test_client(), config)


def verdict_done(record: dict[str, Any]) -> bool:
    return record["verdict"] is not None and record["verdict"]["state"] == "done"


def grading(record: dict[str, Any]) -> bool:
    return record["verdict"] is not None and record["verdict"]["state"] == "grading"


async def checkpoint_waiting(service: Service, key: str, execution_id: str, attempt: int) -> str:
    def ready(record: dict[str, Any]) -> bool:
        return record["status"] == "awaiting_review" and record["checkpoints"][0]["attempt"] == attempt

    record = await wait_for(service, key, execution_id, ready)
    checkpoint_id: str = record["checkpoints"][0]["checkpointId"]
    return checkpoint_id


async def decided(service: Service, reviewer: Account, execution_id: str, checkpoint_id: str, **body: Any) -> None:
    code, answer = await decide(service, reviewer.key, execution_id, checkpoint_id, body)
    assert code == 200, answer


@dataclass
class Suite:
    runs: list[ExportRun]
    # The status record of each started run, by execution id, as GET /api/eval/status serves it once scored.
    records: dict[str, dict[str, Any]]


async def build_suite(service: Service) -> Suite:
    """Five runs: the model's task twice (an edited approval; a rejection, then an approval of its finish), the
    offline note with a checkpoint and a human grade, a run that fails, and one the suite has not started."""
    owner = await account(service, OWNER, "eval:manage")
    reviewer = await account(service, REVIEWER, "eval:manage")
    asked = task(
        taskName="Capital", taskDescription=QUESTION, agentModel=MODEL, testMode="with-verification",
        checkpoints=[SEND_IT], assignedReviewer=REVIEWER, expected="Paris", scorers=["exact", "includes"],
    )
    approved = await create_ok(service, owner.key, asked)
    checkpoint = await checkpoint_waiting(service, owner.key, approved, 1)
    await decided(service, reviewer, approved, checkpoint, decision="approve", editedArgs=EDITED, rating=4,
                  labels=["clear"])

    revised = await create_ok(service, owner.key, asked)
    checkpoint = await checkpoint_waiting(service, owner.key, revised, 1)
    await decided(service, reviewer, revised, checkpoint, decision="reject", comment=REJECTED)
    checkpoint = await checkpoint_waiting(service, owner.key, revised, 2)
    await decided(service, reviewer, revised, checkpoint, decision="approve")

    graded = await create_ok(
        service, owner.key,
        task(taskName="Note", taskDescription=NOTE, agentModel="offline", testMode="with-verification",
             checkpoints=[DRAFT], assignedReviewer=REVIEWER,
             scorers=["human", {"type": "regex", "pattern": "plan", "name": "names-file"}]),
    )
    record = await wait_for(service, owner.key, graded, paused_at(0))
    await decided(service, reviewer, graded, record["checkpoints"][0]["checkpointId"], decision="approve", rating=5,
                  labels=["tidy"])
    await wait_for(service, owner.key, graded, grading)
    answer = await service.client.post(
        f"/api/eval/executions/{graded}/grade",
        json={"passed": False, "rating": 2, "labels": ["terse"], "comment": "Say more."},
        headers=bearer(reviewer.key),
    )
    assert answer.status_code == 200, await answer.get_json()

    failed = await create_ok(
        service, owner.key,
        task(taskName="Juggle", taskDescription="Juggle three flaming torches.", agentModel="offline",
             testMode="without-verification", expected="done", scorers=["exact"]),
    )
    records = {
        execution_id: await wait_for(service, owner.key, execution_id, verdict_done)
        for execution_id in (approved, revised, graded, failed)
    }
    suite = ("ste_1", "Capitals & notes")
    runs = [
        ExportRun(approved, *suite, 0, MODEL, "with-verification", 1),
        ExportRun(revised, *suite, 0, MODEL, "with-verification", 2),
        ExportRun(graded, *suite, 1, "offline", "with-verification", 1),
        ExportRun(failed, *suite, 2, "offline", "without-verification", 1),
        ExportRun(None, *suite, 3, "offline", "with-verification", 1, state="pending", task_name="Later"),
    ]
    return Suite(runs, records)


async def exported(service: Service, write: Any, runs: list[ExportRun]) -> bytes:
    async with service.db.reading() as session:
        return b"".join([piece async for piece in write(session, runs)])


def decisions_of(record: dict[str, Any]) -> list[tuple[Any, ...]]:
    """The (stage, decision, by, via, comment, editedArgs, rating, labels) of every attempt, from a status record."""
    return [
        (cp["stage"], a["decision"], a["by"], a["via"], a["comment"], a["editedArgs"], a["rating"], a["labels"])
        for cp in record["checkpoints"]
        for a in cp["attempts"]
    ]


async def test_jsonl_and_csv_carry_each_run_as_the_status_record_shows_it(served: Service) -> None:
    suite = await build_suite(served)
    approved, revised, graded, failed = (run.execution_id for run in suite.runs[:4])
    assert approved and revised and graded and failed

    text = (await exported(served, jsonl_export, suite.runs)).decode()
    assert text.endswith("\n")
    lines = [json.loads(line) for line in text.splitlines()]
    assert [(r["executionId"], r["taskIndex"], r["model"], r["testMode"], r["repeat"]) for r in lines] == [
        (run.execution_id, run.task_index, run.model, run.test_mode, run.repeat) for run in suite.runs
    ]
    assert {(r["suiteId"], r["suiteName"]) for r in lines} == {("ste_1", "Capitals & notes")}
    for line in lines[:4]:
        record = suite.records[line["executionId"]]
        assert (line["taskName"], line["status"], line["expected"]) == (
            record["taskName"], record["status"], record["expected"]
        )
        assert line["output"] == (record["result"] or {}).get("output")
        assert line["verdict"] == record["verdict"]
        assert line["metrics"] == record["metrics"]
        assert [
            (d["stage"], d["decision"], d["by"], d["via"], d["comment"], d["editedArgs"], d["rating"], d["labels"])
            for d in line["decisions"]
        ] == decisions_of(record)
        assert all(d["at"] and d["at"].endswith("Z") for d in line["decisions"])

    first, second, note, juggle, later = lines
    assert first["input"] == QUESTION and first["output"] == "Paris"
    assert (first["verdict"]["passed"], first["verdict"]["score"]) == (True, 1.0)
    # Two model requests of 100 input and 20 output tokens each (the local server's usage).
    assert (first["metrics"]["inputTokens"], first["metrics"]["outputTokens"]) == (200, 40)
    assert first["metrics"]["reviewWaitMs"] > 0
    [edit] = first["decisions"]
    assert (edit["stage"], edit["decision"], edit["editedArgs"], edit["originalArgs"]) == (
        "Send it?", "approve", {"subject": EDITED["subject"]}, MAIL
    )
    assert (edit["by"], edit["via"], edit["rating"], edit["labels"]) == (REVIEWER, "api", 4, ["clear"])
    assert second["output"] == "Lyon" and second["verdict"]["passed"] is False
    assert [(d["attempt"], d["decision"], d["comment"]) for d in second["decisions"]] == [
        (1, "reject", REJECTED), (2, "approve", "")
    ]
    assert [(d["stage"], d["origin"], d["decision"], d["rating"], d["labels"]) for d in note["decisions"]] == [
        ("Draft note", "caller", "approve", 5, ["tidy"]),
        ("Grade the result", "grade", "reject", 2, ["terse"]),
    ]
    human = next(s for s in note["verdict"]["scores"] if s["scorer"] == "human")
    assert (human["score"], human["explanation"], human["by"]) == (0.25, "Say more.", REVIEWER)
    assert juggle["status"] == "failed" and juggle["error"]["code"]
    assert juggle["verdict"]["passed"] is False
    assert later == {
        "suiteId": "ste_1", "suiteName": "Capitals & notes", "taskIndex": 3, "model": "offline",
        "testMode": "with-verification", "repeat": 1, "executionId": None, "taskName": "Later", "input": None,
        "status": "pending", "createdAt": None, "completedAt": None, "output": None, "expected": None, "error": None,
        "verdict": None, "metrics": None, "decisions": [],
    }

    table = (await exported(served, csv_export, suite.runs)).decode()
    rows = list(csv.DictReader(io.StringIO(table, newline="")))
    assert len(rows) == 5
    assert [row["executionId"] for row in rows] == [run.execution_id or "" for run in suite.runs]
    header = next(csv.reader(io.StringIO(table, newline="")))
    assert [name for name in header if name.startswith("score_")] == [
        "score_exact", "score_includes", "score_human", "score_names-file"
    ]
    one, two, three, four, five = rows
    assert one["input"] == QUESTION  # the comma, the quotes and the line break kept in one field
    assert (one["output"], one["expected"], one["passed"], one["score"]) == ("Paris", "Paris", "true", "1.0")
    assert (one["score_exact"], one["score_includes"], one["score_human"]) == ("1.0", "1.0", "")
    assert (one["inputTokens"], one["outputTokens"], one["edits"], one["decisions"], one["meanRating"]) == (
        "200", "40", "1", "1", "4.0"
    )
    assert one["reviewWaitMs"] == str(first["metrics"]["reviewWaitMs"])
    assert (two["output"], two["passed"], two["checkpointsRejected"], two["edits"]) == ("Lyon", "false", "1", "0")
    assert (three["score_human"], three["score_names-file"], three["meanRating"]) == (
        "0.25", str(next(s["score"] for s in note["verdict"]["scores"] if s["scorer"] == "names-file")), "3.5"
    )
    assert (four["status"], four["passed"], four["errorCode"]) == ("failed", "false", juggle["error"]["code"])
    assert (five["status"], five["taskName"], five["executionId"], five["passed"]) == ("pending", "Later", "", "")


async def inspect_view_lists(path: Path, task: str, samples: int) -> None:
    """`inspect view`'s own server (no browser) lists the log in its folder and serves its header."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    viewer = await asyncio.create_subprocess_exec(
        str(Path(sys.executable).with_name("inspect")), "view", "--log-dir", str(path.parent), "--host", "127.0.0.1",
        "--port", str(port), stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL,
    )
    try:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}/api", timeout=10) as client:

            async def listing() -> dict[str, Any] | None:
                try:
                    answer = await client.get("/logs")
                except httpx.TransportError:
                    return None  # not listening yet
                body: dict[str, Any] = answer.json()
                return body

            listed = await until(listing, timeout=60)
            [entry] = listed["files"]
            assert entry["name"].endswith(path.name) and entry["task"] == task, listed
            headers = (await client.get("/log-headers", params={"file": entry["name"]})).json()
            assert [(h["eval"]["task"], h["results"]["total_samples"]) for h in headers] == [(task, samples)]
    finally:
        viewer.terminate()
        await viewer.wait()


async def test_the_inspect_log_reads_back_with_inspects_own_reader(served: Service, tmp_path: Path) -> None:
    suite = await build_suite(served)
    approved, revised, graded, failed = (run.execution_id for run in suite.runs[:4])
    path = tmp_path / "suite.eval"
    path.write_bytes(await exported(served, inspect_export, suite.runs))
    log = await read_eval_log_async(str(path))

    assert log.status == "started"  # one run waits to start: it has no sample, and the suite is not done
    assert (log.eval.task, log.eval.task_id) == ("Capitals & notes", "ste_1")
    assert log.eval.model == f"{MODEL}, offline"
    assert log.samples is not None and len(log.samples) == 4
    by_run = {sample.uuid: sample for sample in log.samples}
    assert set(by_run) == {approved, revised, graded, failed}
    first, second, note, juggle = (by_run[e] for e in (approved, revised, graded, failed))
    # The model's task is one sample id across its repeats, which are its epochs.
    assert (first.id, first.epoch, second.id, second.epoch) == (
        "0-openai_scripted-with-verification", 1, "0-openai_scripted-with-verification", 2
    )
    assert (first.input, first.target) == (QUESTION, "Paris")
    assert first.output.completion == "Paris"

    assert first.scores is not None and set(first.scores) == {"exact", "includes"}
    assert (first.scores["exact"].value, first.scores["exact"].metadata) == (
        1.0, {"type": "exact", "passed": True, "by": "vouch"}
    )
    assert first.scores["exact"].explanation == "the output equals the expected value"
    assert second.scores is not None and second.scores["exact"].value == 0.0
    assert note.scores is not None and note.scores["human"].value == 0.25
    assert (note.scores["human"].explanation, note.scores["human"].metadata) == (
        "Say more.",
        {"type": "human", "passed": False, "by": REVIEWER, "rating": 2, "labels": ["terse"], "comment": "Say more.",
         "via": "api"},
    )

    # The conversation: the task, the model's turn with its tool call, the tool's result, the final answer.
    user, asked, answered, final = first.messages
    assert isinstance(user, ChatMessageUser) and user.text == QUESTION
    assert isinstance(asked, ChatMessageAssistant) and asked.text == "Sending the report first."
    assert asked.tool_calls is not None
    [mail_call] = asked.tool_calls
    # The call as the model proposed it (the reviewer's edit is in the decisions), and what it returned.
    assert (mail_call.function, mail_call.arguments) == ("send_email", MAIL)
    assert isinstance(answered, ChatMessageTool) and answered.tool_call_id == mail_call.id
    assert answered.error is None and json.loads(answered.text)["to"] == MAIL["to"]
    assert isinstance(final, ChatMessageAssistant) and final.text == "Paris"
    # The rejected call was answered with the reviewer's comment, as the model was.
    rejected = next(m for m in second.messages if isinstance(m, ChatMessageTool))
    assert rejected.error is not None and rejected.error.type == "approval"
    assert REJECTED in rejected.text and REVIEWER in rejected.text
    # The offline agent's steps: its messages and its write_file call with the result.
    tools = [m for m in note.messages if isinstance(m, ChatMessageTool)]
    assert [m.function for m in tools] == ["write_file"]
    assert any(m.tool_calls and m.tool_calls[0].function == "write_file" for m in note.messages
               if isinstance(m, ChatMessageAssistant))

    # Usage per model, and the reviewers' decisions in the metadata.
    usage = first.model_usage
    assert [(u.input_tokens, u.output_tokens, u.total_tokens) for u in usage.values()] == [(200, 40, 240)]
    assert note.model_usage == {}
    [edit] = first.metadata["decisions"]
    assert (edit["stage"], edit["decision"], edit["by"], edit["via"], edit["editedArgs"], edit["rating"],
            edit["labels"]) == ("Send it?", "approve", REVIEWER, "api", {"subject": EDITED["subject"]}, 4, ["clear"])
    assert [(d["decision"], d["comment"]) for d in second.metadata["decisions"]] == [
        ("reject", REJECTED), ("approve", "")
    ]
    assert [d["stage"] for d in note.metadata["decisions"]] == ["Draft note", "Grade the result"]
    assert (first.metadata["model"], first.metadata["testMode"], first.metadata["repeat"]) == (
        MODEL, "with-verification", 1
    )
    assert first.metadata["metrics"] == suite.records[approved]["metrics"]
    assert juggle.error is not None and juggle.metadata["status"] == "failed"
    assert first.error is None

    # The results: per scorer, its mean and the share of runs it passed.
    assert log.results is not None
    results = {score.name: score for score in log.results.scores}
    assert math.isclose(results["exact"].metrics["accuracy"].value, 1 / 3)
    assert math.isclose(results["exact"].metrics["mean"].value, 1 / 3)
    assert (log.results.total_samples, log.results.completed_samples) == (4, 3)
    assert log.stats.model_usage[next(iter(usage))].input_tokens == 400

    # What `inspect view` loads: the header alone, each sample's summary, and a sample by id and epoch.
    header = await read_eval_log_async(str(path), header_only=True)
    assert header.samples is None and header.results is not None
    summaries = await read_eval_log_sample_summaries_async(str(path))
    assert sorted((s.id, s.epoch) for s in summaries) == sorted((s.id, s.epoch) for s in log.samples)
    summary = next(s for s in summaries if s.uuid == approved)
    assert summary.scores is not None and summary.scores["exact"].value == 1.0
    again = await read_eval_log_sample_async(str(path), id=second.id, epoch=2)
    assert again.uuid == revised

    await inspect_view_lists(path, "Capitals & notes", 4)

    # Once no run waits (the last one cancelled with its suite), the log is a finished one.
    cancelled = [*suite.runs[:4], ExportRun(None, "ste_1", "Capitals & notes", 3, "offline", "with-verification", 1,
                                            state="cancelled")]
    path.write_bytes(await exported(served, inspect_export, cancelled))
    assert (await read_eval_log_async(str(path), header_only=True)).status == "success"



def test_web_and_worker_processes_start_without_importing_inspect() -> None:
    """Inspect AI (~40 packages) is imported by the Inspect writer alone, when a log is asked for."""
    script = (
        "import sys, api.app, agents.worker, core.exports; "
        "print(sorted(m for m in sys.modules if m.split('.')[0] == 'inspect_ai'))"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True, timeout=60)
    assert done.stdout.strip() == "[]", done.stdout
