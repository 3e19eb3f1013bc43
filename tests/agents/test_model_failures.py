"""A model-driven run that ends without `finish` fails with a stable code, never `completed` (issue 20.1).

Budgets spent, a provider that is down (retried with backoff first), a request the provider refuses, a model
that declines or answers nothing usable: each ends the run `failed` with `error: {code, detail}` and keeps
everything recorded before it (checkpoints, decisions, events). The model is the real OpenAI client against a
local scripted server (tests/support/fake_llm.py).
"""

from __future__ import annotations

from typing import Any

import pytest

from core.db import Database
from core.settings import Settings
from core.vocabulary import Channel
from review import decide
from tests.agents.test_model_agent import model_settings, run
from tests.agents.test_runner import REVIEWER, Snapshot, new_execution, snapshot
from tests.support.fake_llm import Answer, call, fail, fake_llm, say


def failed_with(snap: Snapshot, code: str) -> dict[str, Any]:
    """The run's error, once it is certain the run failed with `code` and never said it completed."""
    assert snap.execution.status == "failed", (snap.execution.status, snap.execution.error)
    assert snap.execution.result is None
    assert "execution.completed" not in snap.types
    error = snap.execution.error_info
    assert error is not None and error["code"] == code, error
    assert [p["error"] for p in snap.payloads("execution.failed")] == [error]
    return error


@pytest.mark.parametrize(
    ("budget", "code", "says"),
    [
        ({"agent_max_steps": 3}, "step_budget_exhausted", "used 3 of 3 steps"),
        ({"agent_max_tokens": 250}, "token_budget_exhausted", "of 250 tokens"),
    ],
)
async def test_a_model_that_never_finishes_fails_with_its_budget_named(
    db: Database, settings: Settings, budget: dict[str, Any], code: str, says: str
) -> None:
    async with fake_llm(then=lambda _body: call("list_files")) as llm:
        config = model_settings(settings, llm, **budget)
        exe = await new_execution(db, config, "Look around.", agent_model="openai:scripted")
        await run(db, config)
        error = failed_with(await snapshot(db, exe), code)
        assert says in error["detail"]


async def test_a_provider_that_is_down_is_retried_then_fails_the_run_with_its_checkpoints_kept(
    db: Database, settings: Settings
) -> None:
    retries = 2
    async with fake_llm(call("request_review", stage="Plan", summary="the plan")) as llm:
        config = model_settings(settings, llm, agent_request_retries=retries)
        exe = await new_execution(
            db,
            config,
            "Plan, then report.",
            test_mode="with-verification",
            agent_model="openai:scripted",
            checkpoints=[{"stage": "Plan", "verificationQuestion": "Plan OK?"}],
        )
        await run(db, config)
        [checkpoint] = (await snapshot(db, exe)).checkpoints
        async with db.transaction() as session:
            await decide(session, checkpoint.id, "approve", by=REVIEWER, via=Channel.API, comment="go on")
        # The provider goes down: every answer is a 503, each retried with backoff by the client.
        llm.add(*[fail(503, "overloaded") for _ in range(retries + 1)])
        await run(db, config)
        snap = await snapshot(db, exe)
        error = failed_with(snap, "model_unavailable")
        assert "503" in error["detail"]
        assert len(llm.requests) == 1 + retries + 1
        # Everything before the failure is kept: the checkpoint, its decision and their events.
        assert [(c.stage, c.status) for c in snap.checkpoints] == [("Plan", "approved")]
        assert [(d.decision, d.decided_by, d.comment) for d in snap.decisions] == [("approve", REVIEWER, "go on")]
        assert snap.types.index("checkpoint.awaiting_review") < snap.types.index("checkpoint.decided")


async def test_a_provider_nobody_answers_at_fails_with_model_unavailable(db: Database, settings: Settings) -> None:
    async with fake_llm() as gone:
        config = model_settings(settings, gone, agent_request_retries=1)
    # The server is closed: every connection is refused.
    exe = await new_execution(db, config, "Anything.", agent_model="openai:scripted")
    await run(db, config)
    failed_with(await snapshot(db, exe), "model_unavailable")


async def test_a_request_the_provider_refuses_is_not_retried_and_fails_clearly(
    db: Database, settings: Settings
) -> None:
    async with fake_llm(fail(401, "Incorrect API key provided")) as llm:
        config = model_settings(settings, llm)
        exe = await new_execution(db, config, "Anything.", agent_model="openai:scripted")
        await run(db, config)
        error = failed_with(await snapshot(db, exe), "provider_failed")
        assert "HTTP 401" in error["detail"] and "Incorrect API key" in error["detail"]
        assert len(llm.requests) == 1


async def test_a_model_that_declines_fails_with_model_refused(db: Database, settings: Settings) -> None:
    async with fake_llm(Answer(refusal="I can't help with that.")) as llm:
        config = model_settings(settings, llm)
        exe = await new_execution(db, config, "Anything.", agent_model="openai:scripted")
        await run(db, config)
        error = failed_with(await snapshot(db, exe), "model_refused")
        assert "I can't help with that." in error["detail"]
        assert len(llm.requests) == 1


@pytest.mark.parametrize(
    "unusable",
    [Answer(), Answer(text="   "), Answer(text="The report is as follow", finish_reason="length")],
    ids=["empty", "blank", "cut-off"],
)
async def test_an_answer_with_nothing_usable_is_never_taken_as_finishing(
    db: Database, settings: Settings, unusable: Answer
) -> None:
    async with fake_llm(then=lambda _body: unusable) as llm:
        config = model_settings(settings, llm)
        exe = await new_execution(db, config, "Anything.", agent_model="openai:scripted")
        await run(db, config)
        failed_with(await snapshot(db, exe), "model_refused")
        assert len(llm.requests) == 3  # asked again twice, each time saying why


async def test_a_model_asked_again_after_an_empty_answer_may_still_finish(db: Database, settings: Settings) -> None:
    async with fake_llm(Answer(), say("All done: nothing to do.")) as llm:
        config = model_settings(settings, llm)
        exe = await new_execution(db, config, "Anything.", agent_model="openai:scripted")
        await run(db, config)
        snap = await snapshot(db, exe)
        # A text answer is the model's final answer, as before.
        assert snap.execution.status == "completed", snap.execution.error
        assert snap.execution.result == {
            "summary": "All done: nothing to do.",
            "output": "All done: nothing to do.",
            "toolCalls": [],
        }
        asked = llm.requests[1]["messages"][-1]
        assert asked["role"] == "user" and "finish" in asked["content"]
