"""Verdicts (issue 23) through the API with the in-process worker: scorers checked at create, each scorer run on
a real run's output (a model agent against a local OpenAI-compatible server, so `result.output` is its `finish`
text), the judge's verdict, a failed run failing every scorer, the human grade over the API, and the completion
webhook held back until the verdict is recorded and carrying it to a real receiver."""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator
from typing import Any

import pytest
import sqlalchemy as sa

from core.allowlist import parse_allowlist
from core.models import Decision, Event, WebhookDelivery
from core.settings import Settings
from core.webhook_secrets import derive_secret
from tests.api.helpers import account, create, create_ok, decide, get_status, paused_at, task, wait_for
from tests.conftest import Service, bearer
from tests.support.fake_llm import Answer, FakeLLM, call, fail, fake_llm
from tests.support.model_service import model_service
from tests.support.waiting import until
from tests.support.webhook_receiver import webhook_receiver

OWNER = "owner@example.com"
REVIEWER = "grader@example.com"
MODEL = "openai:scripted"


def scripted(body: dict[str, Any]) -> Answer:
    """The agent says what its task's SAY<...> holds; the judge answers what its rubric's JUDGE<...> holds."""
    said = json.dumps(body["messages"])
    tools = [tool["function"]["name"] for tool in body.get("tools", [])]
    if "verdict" in tools:
        judged = re.search(r"JUDGE<([^>]*)>", said)
        assert judged is not None
        if judged.group(1) == "http400":
            return fail(400, "the judge refuses this request")
        passed, score, reasoning = judged.group(1).split("|")
        return call("verdict", passed=passed == "pass", score=float(score), reasoning=reasoning)
    answer = re.search(r"SAY<([^>]*)>", said)
    assert answer is not None
    return call("finish", summary=answer.group(1).replace("'", '"'))


@pytest.fixture
async def llm() -> AsyncIterator[FakeLLM]:
    async with fake_llm(then=scripted) as server:
        yield server


@pytest.fixture
async def scored(settings: Settings, llm: FakeLLM) -> AsyncIterator[Service]:
    receivers = {"webhook_allowlist": parse_allowlist("127.0.0.1"), "webhook_timeout_seconds": 5.0}
    async with model_service(settings, llm, **receivers) as service:
        yield service


def says(answer: str, **fields: Any) -> dict[str, Any]:
    return task(
        taskDescription=f"Answer the question, then finish. SAY<{answer}>",
        testMode="without-verification",
        agentModel=MODEL,
        **fields,
    )


def verdict_done(record: dict[str, Any]) -> bool:
    assert record["status"] != "failed" or record["verdict"] is not None, record
    return record["verdict"] is not None and record["verdict"]["state"] == "done"


def grading(record: dict[str, Any]) -> bool:
    return record["verdict"] is not None and record["verdict"]["state"] == "grading"


async def test_scorers_are_checked_at_create(api_only: Service) -> None:
    owner = await account(api_only, OWNER, "eval:manage")
    cases = [
        ({"scorers": ["nearly"]}, "/scorers/0/type", "unknown scorer"),
        ({"scorers": [{"type": "regex", "pattern": "(unclosed"}]}, "/scorers/0/pattern", "not a valid regular"),
        ({"scorers": [{"type": "regex"}]}, "/scorers/0/pattern", "is required"),
        ({"scorers": [{"type": "json_schema", "schema": {"type": "nonsense"}}]}, "/scorers/0/schema", "not a valid"),
        ({"scorers": ["exact"]}, "/scorers/0", "give it"),
        ({"expected": "x", "scorers": [{"type": "exact", "colour": "red"}]}, "/scorers/0/colour", "not an option"),
        ({"scorers": ["human"]}, "/assignedReviewer", "human scorer"),
        ({"scorers": [{"type": "llm_judge", "rubric": "r", "model": "nowhere:x"}]}, "/scorers/0/model", ""),
        ({"scorers": [{"type": "llm_judge", "rubric": "r", "model": "offline"}]}, "/scorers/0/model", "cannot judge"),
        ({"scorers": "exact"}, "/scorers", ""),
    ]
    for fields, pointer, words in cases:
        code, payload = await create(api_only, owner.key, task(**fields))
        assert code == 422, (fields, payload)
        assert payload["code"] == "validation_failed"
        assert payload["errors"][0]["pointer"] == pointer, (fields, payload)
        assert words in payload["errors"][0]["detail"], payload
    good = task(
        expected={"city": "Paris"},
        scorers=["exact", {"type": "regex", "pattern": "par", "flags": "i", "name": "mentions"}],
    )
    execution_id = await create_ok(api_only, owner.key, good)
    record = await get_status(api_only, owner.key, execution_id)
    assert record["expected"] == {"city": "Paris"}
    assert record["scorers"] == [
        {"type": "exact", "name": "exact"},
        {"type": "regex", "name": "mentions", "pattern": "par", "flags": "i"},
    ]
    assert record["verdict"] == {"state": "pending", "passed": None, "score": None, "scores": []}
    plain = await create_ok(api_only, owner.key, task())
    assert (await get_status(api_only, owner.key, plain))["verdict"] is None


async def test_each_deterministic_scorer_judges_the_final_answer(scored: Service) -> None:
    owner = await account(scored, OWNER, "eval:manage")
    scorers = ["exact", "includes", {"type": "regex", "pattern": "^par", "flags": "i"}]
    right = await create_ok(scored, owner.key, says("Paris", expected="Paris", scorers=scorers))
    wrong = await create_ok(scored, owner.key, says("It is Lyon", expected="Paris", scorers=scorers))
    schema = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
    shaped = await create_ok(
        scored, owner.key, says("{'city': 'Paris'}", scorers=[{"type": "json_schema", "schema": schema}])
    )
    misshaped = await create_ok(
        scored, owner.key, says("{'city': 7}", scorers=[{"type": "json_schema", "schema": schema}])
    )

    record = await wait_for(scored, owner.key, right, verdict_done)
    assert record["status"] == "completed" and record["result"]["output"] == "Paris"
    verdict = record["verdict"]
    assert (verdict["passed"], verdict["score"]) == (True, 1.0)
    assert [(s["scorer"], s["passed"], s["score"], s["by"]) for s in verdict["scores"]] == [
        ("exact", True, 1.0, "vouch"),
        ("includes", True, 1.0, "vouch"),
        ("regex", True, 1.0, "vouch"),
    ]

    verdict = (await wait_for(scored, owner.key, wrong, verdict_done))["verdict"]
    assert (verdict["passed"], verdict["score"]) == (False, 0.0)
    assert [s["passed"] for s in verdict["scores"]] == [False, False, False]
    assert "missing: Paris" in verdict["scores"][1]["explanation"]

    verdict = (await wait_for(scored, owner.key, shaped, verdict_done))["verdict"]
    assert verdict["passed"] is True
    verdict = (await wait_for(scored, owner.key, misshaped, verdict_done))["verdict"]
    assert verdict["passed"] is False and "/city" in verdict["scores"][0]["explanation"]

    # Recorded once, in columns a suite can count in SQL.
    async with scored.db.reading() as session:
        passes = await session.scalar(
            sa.text("SELECT count(*) FROM executions WHERE verdict_passed = :yes").bindparams(yes=True)
        )
        scored_events = await session.scalar(
            sa.select(sa.func.count()).select_from(Event).where(Event.type == "execution.scored")
        )
    assert (passes, scored_events) == (2, 4)


async def test_the_llm_judge_keeps_its_reasoning_and_an_unreachable_judge_never_passes(
    scored: Service, llm: FakeLLM
) -> None:
    owner = await account(scored, OWNER, "eval:manage")
    judged = await create_ok(
        scored,
        owner.key,
        says(
            "Paris",
            expected="Paris",
            scorers=[{"type": "llm_judge", "rubric": "Names the capital. JUDGE<pass|0.75|Correct city>"}],
        ),
    )
    verdict = (await wait_for(scored, owner.key, judged, verdict_done))["verdict"]
    assert (verdict["passed"], verdict["score"]) == (True, 0.75)
    (entry,) = verdict["scores"]
    assert (entry["scorer"], entry["explanation"], entry["by"]) == ("llm_judge", "Correct city", MODEL)
    judge_request = next(r for r in llm.requests if any(t["function"]["name"] == "verdict" for t in r["tools"]))
    prompt = json.dumps(judge_request["messages"])
    assert "Paris" in prompt and "Names the capital" in prompt

    down = await create_ok(
        scored,
        owner.key,
        says(
            "Paris",
            expected="Paris",
            scorers=["exact", {"type": "llm_judge", "rubric": "JUDGE<http400>", "model": MODEL}],
        ),
    )
    verdict = (await wait_for(scored, owner.key, down, verdict_done))["verdict"]
    assert verdict["passed"] is None  # the exact match passed, but a scorer that could not say is no pass
    assert [s["passed"] for s in verdict["scores"]] == [True, None]
    assert "could not answer" in verdict["scores"][1]["explanation"]


async def test_a_run_that_did_not_complete_fails_every_scorer(scored: Service) -> None:
    owner = await account(scored, OWNER, "eval:manage")
    execution_id = await create_ok(
        scored,
        owner.key,
        task(
            taskDescription="Juggle three flaming torches.",
            agentModel="offline",
            expected="done",
            scorers=["exact", {"type": "llm_judge", "rubric": "JUDGE<pass|1|fine>", "model": MODEL}],
        ),
    )
    record = await wait_for(scored, owner.key, execution_id, verdict_done)
    assert record["status"] == "failed"
    verdict = record["verdict"]
    assert (verdict["passed"], verdict["score"]) == (False, 0.0)
    assert [(s["passed"], s["score"]) for s in verdict["scores"]] == [(False, 0.0), (False, 0.0)]
    assert "ended failed" in verdict["scores"][0]["explanation"]


async def test_the_human_grade_over_the_api_and_the_webhook_waits_for_it(scored: Service) -> None:
    owner = await account(scored, OWNER, "eval:manage")
    grader = await account(scored, REVIEWER, "eval:manage")
    secret = derive_secret(scored.settings.secret_key, owner.user_id, 1)
    async with webhook_receiver([secret]) as receiver:
        execution_id = await create_ok(
            scored,
            owner.key,
            says(
                "Paris",
                expected="Paris",
                scorers=["exact", "human"],
                assignedReviewer=REVIEWER,
                webhookUrl=receiver.url,
            ),
        )
        record = await wait_for(scored, owner.key, execution_id, grading)
        assert record["status"] == "completed"
        assert record["verdict"]["passed"] is None
        assert [s["scorer"] for s in record["verdict"]["scores"]] == ["exact"]
        grade = record["checkpoints"][-1]
        assert (grade["origin"], grade["stage"], grade["status"]) == ("grade", "Grade the result", "awaiting_review")
        # The completion webhook is held back until the verdict: none queued while the grade waits.
        async with scored.db.reading() as session:
            assert await session.scalar(sa.select(sa.func.count()).select_from(WebhookDelivery)) == 0

        path = f"/api/eval/executions/{execution_id}/grade"
        stranger = await account(scored, "stranger@example.com", "eval:manage")
        refused = await scored.client.post(path, json={"passed": True}, headers=bearer(stranger.key))
        assert refused.status_code == 404
        owner_tries = await scored.client.post(path, json={"passed": True}, headers=bearer(owner.key))
        assert owner_tries.status_code == 403
        bad = await scored.client.post(path, json={"passed": False, "rating": 9}, headers=bearer(grader.key))
        assert bad.status_code == 422 and (await bad.get_json())["errors"][0]["pointer"] == "/rating"

        body = {"passed": False, "rating": 2, "labels": ["wrong-format", " terse ", "terse"], "comment": "Say more."}
        answered = await scored.client.post(path, json=body, headers=bearer(grader.key))
        assert answered.status_code == 200, await answered.get_json()
        decision = (await answered.get_json())["decision"]
        assert (decision["decision"], decision["rating"], decision["labels"]) == (
            "reject",
            2,
            ["wrong-format", "terse"],
        )
        again = await scored.client.post(path, json={"passed": True}, headers=bearer(grader.key))
        assert again.status_code == 409 and (await again.get_json())["code"] == "already_decided"

        record = await wait_for(scored, owner.key, execution_id, verdict_done)
        assert record["status"] == "completed"
        verdict = record["verdict"]
        assert (verdict["passed"], verdict["score"]) == (False, 0.625)
        human = verdict["scores"][1]
        assert (human["scorer"], human["passed"], human["score"], human["by"]) == ("human", False, 0.25, REVIEWER)
        assert (human["rating"], human["labels"], human["explanation"]) == (2, ["wrong-format", "terse"], "Say more.")
        shown = record["checkpoints"][-1]["decision"]
        assert (shown["rating"], shown["labels"]) == (2, ["wrong-format", "terse"])
        # The grade is the run's evaluation, not part of the run: its metrics leave it out.
        metrics = record["metrics"]
        assert (metrics["checkpointsRejected"], metrics["reviewLatencyMs"], metrics["reviewWaitMs"]) == (0, [], 0)

        [request] = await until(lambda: receiver.count(1), timeout=15)
        assert request.verified_with == [0]
        sent = receiver.payloads()[0]["data"]
        assert sent["status"] == "completed" and sent["output"] == "Paris"
        assert sent["verdict"] == verdict


async def test_a_checkpoint_decision_keeps_a_rating_and_labels(scored: Service) -> None:
    owner = await account(scored, OWNER, "eval:manage")
    reviewer = await account(scored, REVIEWER, "eval:manage")
    execution_id = await create_ok(
        scored,
        owner.key,
        task(
            taskDescription='Write a note called plan.md saying "ship it".',
            agentModel="offline",
            assignedReviewer=REVIEWER,
            checkpoints=[{"stage": "Draft", "verificationQuestion": "Write it?"}],
        ),
    )
    record = await wait_for(scored, owner.key, execution_id, paused_at(0))
    checkpoint_id = record["checkpoints"][0]["checkpointId"]
    code, payload = await decide(
        scored, reviewer.key, execution_id, checkpoint_id, {"decision": "approve", "labels": ["x" * 51]}
    )
    assert code == 422 and payload["errors"][0]["pointer"] == "/labels"
    code, payload = await decide(
        scored, reviewer.key, execution_id, checkpoint_id, {"decision": "approve", "rating": 4, "labels": ["clear"]}
    )
    assert code == 200, payload
    async with scored.db.reading() as session:
        row = await session.scalar(sa.select(Decision).where(Decision.checkpoint_id == checkpoint_id))
    assert row is not None and (row.rating, row.labels) == (4, ["clear"])
    record = await get_status(scored, owner.key, execution_id)
    shown = record["checkpoints"][0]
    assert (shown["decision"]["rating"], shown["decision"]["labels"]) == (4, ["clear"])
    assert (shown["attempts"][0]["rating"], shown["attempts"][0]["labels"]) == (4, ["clear"])
