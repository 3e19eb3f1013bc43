"""GET /api/eval/suites/<id>/export over real HTTP (issue 23, item 6): a suite of real runs (the offline agent and a
priced model profile served by the local OpenAI-compatible fake, both test modes, a reviewer who rejects one run and
approves another over the API) exported as JSON Lines, CSV and an Inspect AI log, each parsed back by its own
reader (`json`, `csv`, `inspect_ai.log`) and held against the suite's record, which the API computes apart
(core/suite_summary.py). Then the refusals: an unknown format, another user's suite, a key without `eval:read`."""

from __future__ import annotations

import csv
import io
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from inspect_ai.log import read_eval_log_async

from core.db import Database
from core.model_profiles import ModelProfile
from core.settings import Settings
from tests.conftest import bearer, make_account
from tests.support.fake_llm import call, fake_llm
from tests.support.live import live_server
from tests.support.waiting import until

OWNER = "exports@example.com"
SUITES = "/api/eval/suites"
PASSES = [{"type": "regex", "pattern": "."}]
REJECTED = 'Not this week, "team".\nAsk again.'


def tasks() -> list[dict[str, Any]]:
    plain = {
        "taskName": "Write a note",
        "taskDescription": 'Write a note called "a.md" saying "hello". Then summarise.',
        "scorers": PASSES,
    }
    reviewed = {
        "taskName": "Mail, the team",  # a comma: the CSV must keep it in its field
        "taskDescription": 'Write a note called "notes.md" saying "v2 is out". '
        'Then send an email to team@example.com with subject "v2" and body "v2 is out". Then summarise.',
        "assignedReviewer": OWNER,
        "maxRevisions": 0,
        "checkpoints": [{"stage": "Send", "verificationQuestion": "Send it?"}],
        "scorers": PASSES,
    }
    return [plain, reviewed]


async def json_of(response: httpx.Response) -> dict[str, Any]:
    payload: dict[str, Any] = response.json()
    return payload


class Api:
    def __init__(self, http: httpx.AsyncClient, key: str) -> None:
        self.http, self.key = http, key

    async def get(self, path: str, **params: str) -> httpx.Response:
        return await self.http.get(path, params=params, headers=bearer(self.key))

    async def suite(self, suite_id: str) -> dict[str, Any]:
        """The suite's record, with its runs (every page of them) as `runs`."""
        response = await self.get(f"{SUITES}/{suite_id}")
        assert response.status_code == 200, response.text
        record = await json_of(response)
        runs: list[dict[str, Any]] = []
        cursor: str | None = None
        while True:
            page = await json_of(await self.get(f"{SUITES}/{suite_id}/runs", **({"cursor": cursor} if cursor else {})))
            runs.extend(page["runs"])
            cursor = page["nextCursor"]
            if cursor is None:
                return {**record, "runs": runs}

    async def decide_waiting(self, suite_id: str, model: str, decision: str, comment: str = "") -> str:
        """Decide the waiting checkpoint of `model`'s run once it waits; that run's execution id."""

        async def waiting() -> str | None:
            runs = (await self.suite(suite_id))["runs"]
            found = next((r for r in runs if r["model"] == model and r["status"] == "awaiting_review"), None)
            return None if found is None else str(found["executionId"])

        execution_id = await until(waiting, timeout=90)
        record = await json_of(await self.get(f"/api/eval/status/{execution_id}"))
        checkpoint = next(c for c in record["checkpoints"] if c["status"] == "awaiting_review")
        answer = await self.http.post(
            f"/api/eval/executions/{execution_id}/checkpoints/{checkpoint['checkpointId']}/decision",
            json={"decision": decision, "comment": comment},
            headers=bearer(self.key),
        )
        assert answer.status_code == 200, answer.text
        return execution_id


@pytest.fixture
async def served(settings: Settings) -> AsyncIterator[str]:
    async with fake_llm(then=lambda _body: call("finish", summary="done")) as llm:
        profile = ModelProfile(
            "cheap", "openai", "local-model", base_url=llm.base_url, input_usd_per_mtok=1.0, output_usd_per_mtok=2.0
        )
        with live_server(
            settings.with_changes(model_profiles=(profile,), agent_request_retries=0), run_worker=True
        ) as base:
            yield base


def same_runs(exported: list[tuple[Any, ...]], record: dict[str, Any], *, ordered: bool = True) -> None:
    """The export lists the suite's runs (in its order), each as the suite's record says."""
    expected = [
        (
            r["executionId"],
            r["taskIndex"],
            r["taskName"],
            r["model"],
            r["testMode"],
            r["repeat"],
            r["status"],
            r["passed"],
        )
        for r in record["runs"]
    ]
    assert exported == expected if ordered else sorted(exported) == sorted(expected)


async def test_each_format_reads_back_as_the_suites_record(
    settings: Settings, db: Database, served: str, tmp_path: Path
) -> None:
    owner = await make_account(db, settings, OWNER, "eval:manage")
    stranger = await make_account(db, settings, "stranger@example.com", "eval:manage")
    creator = await make_account(db, settings, "creator@example.com", "eval:create")
    async with httpx.AsyncClient(base_url=served, timeout=60) as http:
        api = Api(http, owner.key)
        body = {"name": 'Nightly, "exports"', "tasks": tasks(), "models": ["offline", "cheap"], "testMode": "both"}
        created = await http.post(SUITES, json=body, headers=bearer(owner.key))
        assert created.status_code == 201, created.text
        suite_id = (await json_of(created))["suiteId"]
        rejected = await api.decide_waiting(suite_id, "offline", "reject", REJECTED)
        approved = await api.decide_waiting(suite_id, "cheap", "approve")

        async def completed() -> dict[str, Any] | None:
            record = await api.suite(suite_id)
            return record if record["status"] == "completed" else None

        record = await until(completed, timeout=120)
        assert len(record["runs"]) == 8

        answer = await api.get(f"{SUITES}/{suite_id}/export", format="jsonl")
        assert answer.status_code == 200, answer.text
        assert answer.headers["content-type"] == "application/jsonl"
        assert answer.headers["content-disposition"] == f'attachment; filename="{suite_id}.jsonl"'
        # Sent as written: chunked, no length known in advance.
        assert answer.headers.get("transfer-encoding") == "chunked" and "content-length" not in answer.headers
        lines = [json.loads(line) for line in answer.text.splitlines()]
        same_runs(
            [
                (
                    r["executionId"],
                    r["taskIndex"],
                    r["taskName"],
                    r["model"],
                    r["testMode"],
                    r["repeat"],
                    r["status"],
                    r["verdict"]["passed"],
                )
                for r in lines
            ],
            record,
        )
        assert {r["suiteId"] for r in lines} == {suite_id} and {r["suiteName"] for r in lines} == {body["name"]}
        by_id = {r["executionId"]: r for r in lines}
        assert [(d["decision"], d["by"], d["via"], d["comment"]) for d in by_id[rejected]["decisions"]] == [
            ("reject", OWNER, "api", REJECTED)
        ]
        assert [(d["decision"], d["by"]) for d in by_id[approved]["decisions"]] == [("approve", OWNER)]
        assert by_id[approved]["metrics"]["inputTokens"] > 0
        # Without the default: jsonl, the same runs.
        default = await api.get(f"{SUITES}/{suite_id}/export")
        assert default.headers["content-type"] == "application/jsonl"
        assert [json.loads(line)["executionId"] for line in default.text.splitlines()] == list(by_id)

        answer = await api.get(f"{SUITES}/{suite_id}/export", format="csv")
        assert answer.status_code == 200, answer.text
        assert answer.headers["content-type"] == "text/csv; charset=utf-8"
        assert answer.headers["content-disposition"] == f'attachment; filename="{suite_id}.csv"'
        rows = list(csv.DictReader(io.StringIO(answer.text, newline="")))
        passed = {"true": True, "false": False, "": None}
        same_runs(
            [
                (
                    r["executionId"],
                    int(r["taskIndex"]),
                    r["taskName"],
                    r["model"],
                    r["testMode"],
                    int(r["repeat"]),
                    r["status"],
                    passed[r["passed"]],
                )
                for r in rows
            ],
            record,
        )
        row = next(r for r in rows if r["executionId"] == rejected)
        assert (row["checkpointsRejected"], row["decisions"]) == ("1", "1")

        answer = await api.get(f"{SUITES}/{suite_id}/export", format="inspect")
        assert answer.status_code == 200, answer.text[:200]
        assert answer.headers["content-type"] == "application/zip"
        assert answer.headers["content-disposition"] == f'attachment; filename="{suite_id}.eval"'
        path = tmp_path / f"{suite_id}.eval"
        path.write_bytes(answer.content)
        log = await read_eval_log_async(str(path))
        assert log.status == "success" and log.samples is not None
        same_runs(
            [
                (
                    s.metadata["executionId"],
                    s.metadata["taskIndex"],
                    s.metadata["taskName"],
                    s.metadata["model"],
                    s.metadata["testMode"],
                    s.metadata["repeat"],
                    s.metadata["status"],
                    None if not s.scores else all((score.metadata or {})["passed"] for score in s.scores.values()),
                )
                for s in log.samples
            ],
            record,
            ordered=False,  # Inspect's writer orders the samples its own way (by id and epoch)
        )
        sample = next(s for s in log.samples if s.metadata["executionId"] == rejected)
        assert [d["comment"] for d in sample.metadata["decisions"]] == [REJECTED]

        # Refusals: a format there is not, a parameter there is not, another user's suite, a key that may not read.
        answer = await api.get(f"{SUITES}/{suite_id}/export", format="xml")
        assert answer.status_code == 422 and (await json_of(answer))["code"] == "validation_failed"
        assert answer.headers["content-type"] == "application/problem+json"
        answer = await api.get(f"{SUITES}/{suite_id}/export", format="csv", page="2")
        assert answer.status_code == 422 and (await json_of(answer))["code"] == "validation_failed"
        answer = await Api(http, stranger.key).get(f"{SUITES}/{suite_id}/export", format="csv")
        assert answer.status_code == 404 and (await json_of(answer))["code"] == "not_found"
        answer = await Api(http, creator.key).get(f"{SUITES}/{suite_id}/export", format="csv")
        assert answer.status_code == 403 and (await json_of(answer))["code"] == "insufficient_scope"
