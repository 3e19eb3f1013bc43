"""A model-backed agent through the real OpenAI client against a local scripted server: checkpoints enforced
in code, rejections that reach the model verbatim, provider errors, budgets, unknown outcomes."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
import sqlalchemy as sa
from aiohttp import web

from agents.claims import claim_execution
from agents.runner import ExecutionRunner
from core.allowlist import parse_allowlist
from core.db import Database
from core.metrics import execution_metrics
from core.models import Execution, MailMessage, utcnow
from core.settings import Settings
from core.vocabulary import Channel
from review import decide
from tests.agents.test_runner import REVIEWER, claim_and_run, new_execution, snapshot
from tests.support.fake_llm import FakeLLM, call, fail, fake_llm, last_tool_result, say
from tests.support.route_server import route_server

MAIL_TASK = "E-mail the weekly report to boss@example.com."
MAIL = {"to": "boss@example.com", "subject": "Weekly report", "body": "All green."}


def model_settings(settings: Settings, llm: FakeLLM, **changes: Any) -> Settings:
    return settings.with_changes(**{"agent_base_url": llm.base_url, "agent_request_retries": 2, **changes})


async def run(db: Database, settings: Settings) -> None:
    await claim_and_run(db, settings)


async def tool_mails(db: Database, execution_id: str) -> list[MailMessage]:
    snap = await snapshot(db, execution_id)
    return snap.mails


async def test_mail_without_review_pauses_first_and_goes_out_once_approved(db: Database, settings: Settings) -> None:
    async with fake_llm(call("send_email", **MAIL), call("finish", summary="Sent the report.")) as llm:
        config = model_settings(settings, llm)
        exe = await new_execution(
            db, config, MAIL_TASK, test_mode="with-verification", agent_model="openai:scripted",
            autoDetectCheckpoints=True,
        )
        snap = await snapshot(db, exe)
        # Detected before the run: the description names sending e-mail.
        assert [(c.origin, c.stage, c.status) for c in snap.checkpoints] == [
            ("auto", "Before sending e-mail", "pending")
        ]
        await run(db, config)
        snap = await snapshot(db, exe)
        assert snap.execution.status == "awaiting_review"
        assert snap.mails == []  # the model asked to send; nothing went out
        awaiting = snap.payloads("checkpoint.awaiting_review")
        assert len(awaiting) == 1
        assert awaiting[0]["nextAction"]["tool"] == "send_email"
        assert awaiting[0]["nextAction"]["args"] == MAIL
        assert snap.checkpoints[0].tool_call_id == snap.calls[0].id
        assert [(c.tool, c.status) for c in snap.calls] == [("send_email", "proposed")]

        async with db.transaction() as session:
            await decide(session, snap.checkpoints[0].id, "approve", by=REVIEWER, via=Channel.API)
        await run(db, config)
        snap = await snapshot(db, exe)
        assert snap.execution.status == "completed", snap.execution.error
        assert snap.execution.result == {
            "summary": "Sent the report.",
            "output": "Sent the report.",
            "toolCalls": ["send_email"],
        }
        assert [(m.recipient, m.subject) for m in snap.mails] == [("boss@example.com", "Weekly report")]
        assert len(llm.requests) == 2
        assert json.loads(last_tool_result(llm.requests[1]))["to"] == "boss@example.com"
        usage = snap.payloads("model.request")
        assert [(u["inputTokens"], u["outputTokens"], u["costUsd"]) for u in usage] == [(100, 20, None)] * 2
        async with db.reading() as session:
            metrics = await execution_metrics(session, await session.get_one(Execution, exe))
        assert (metrics["modelRequests"], metrics["inputTokens"], metrics["outputTokens"]) == (2, 200, 40)
        assert metrics["toolCallsByTool"] == {"send_email": 1} and metrics["costUsd"] is None
        assert metrics["checkpointsApproved"] == 1


async def test_a_rejection_reaches_the_model_verbatim_and_its_next_try_is_the_next_attempt(
    db: Database, settings: Settings
) -> None:
    comment = "Too terse.\nAdd the numbers — and sign it."
    second = {**MAIL, "body": "All green: 12 of 12 checks. — Vouch"}
    async with fake_llm(
        call("send_email", **MAIL),
        lambda body: call("send_email", **second) if comment in last_tool_result(body) else say("lost"),
        call("finish", summary="Sent after revision."),
    ) as llm:
        config = model_settings(settings, llm)
        exe = await new_execution(
            db,
            config,
            MAIL_TASK,
            test_mode="with-verification",
            agent_model="openai:scripted",
            autoDetectCheckpoints=True,
        )
        await run(db, config)
        checkpoint_id = (await snapshot(db, exe)).checkpoints[0].id
        async with db.transaction() as session:
            await decide(session, checkpoint_id, "reject", by=REVIEWER, via=Channel.WEB, comment=comment)
        await run(db, config)
        snap = await snapshot(db, exe)
        assert snap.execution.status == "awaiting_review"
        assert comment in last_tool_result(llm.requests[1])  # verbatim, newline and dash included
        assert [c.attempt for c in snap.checkpoints] == [2]
        awaiting = snap.payloads("checkpoint.awaiting_review")
        assert [(a["attempt"], a["nextAction"]["args"]["body"]) for a in awaiting] == [
            (1, MAIL["body"]),
            (2, second["body"]),
        ]
        assert [(c.tool, c.status) for c in snap.calls] == [("send_email", "rejected"), ("send_email", "proposed")]
        async with db.transaction() as session:
            await decide(session, checkpoint_id, "approve", by=REVIEWER, via=Channel.WEB)
        await run(db, config)
        snap = await snapshot(db, exe)
        assert snap.execution.status == "completed"
        assert [m.text_body for m in snap.mails] == [second["body"]]


async def test_a_caller_checkpoint_the_model_never_asks_for_is_reviewed_before_completion(
    db: Database, settings: Settings
) -> None:
    checkpoint = {"stage": "Final check", "verificationQuestion": "Is the summary right?"}
    async with fake_llm(call("write_file", path="a.md", content="x"), say("All done.")) as llm:
        config = model_settings(settings, llm)
        exe = await new_execution(
            db,
            config,
            "Write a.md.",
            test_mode="with-verification",
            agent_model="openai:scripted",
            checkpoints=[checkpoint],
        )
        await run(db, config)
        snap = await snapshot(db, exe)
        assert snap.execution.status == "awaiting_review"
        [awaiting] = snap.payloads("checkpoint.awaiting_review")
        assert awaiting["stage"] == "Final check"
        assert awaiting["nextAction"]["tool"] == "finish"
        assert awaiting["nextAction"]["args"] == {"summary": "All done."}
        async with db.transaction() as session:
            await decide(session, snap.checkpoints[0].id, "approve", by=REVIEWER, via=Channel.CHAT)
        await run(db, config)
        snap = await snapshot(db, exe)
        assert snap.execution.status == "completed"
        assert snap.execution.result == {"summary": "All done.", "output": "All done.", "toolCalls": ["write_file"]}
        assert [f.path for f in snap.files] == ["a.md"]


async def test_request_review_pauses_at_the_earliest_unanswered_stage_and_the_answer_says_who_approved(
    db: Database, settings: Settings
) -> None:
    checkpoints = [
        {"stage": "Outline", "verificationQuestion": "Outline OK?"},
        {"stage": "Draft", "verificationQuestion": "Draft OK?"},
    ]
    async with fake_llm(
        call("request_review", stage="draft", summary="draft written"),
        lambda body: call("finish", summary=last_tool_result(body)),
    ) as llm:
        config = model_settings(settings, llm)
        exe = await new_execution(
            db,
            config,
            "Write a draft.",
            test_mode="with-verification",
            agent_model="openai:scripted",
            checkpoints=checkpoints,
        )
        await run(db, config)
        snap = await snapshot(db, exe)
        # The model named "draft", but "Outline" comes first and is unanswered: it cannot be skipped.
        [awaiting] = snap.payloads("checkpoint.awaiting_review")
        assert awaiting["stage"] == "Outline"
        assert awaiting["nextAction"]["args"] == {"stage": "draft", "summary": "draft written"}
        async with db.transaction() as session:
            await decide(session, snap.checkpoints[0].id, "approve", by=REVIEWER, via=Channel.WEB, comment="nice")
        await run(db, config)
        # finish: the Draft checkpoint is still unanswered, so it is reviewed before completion.
        snap = await snapshot(db, exe)
        assert snap.execution.status == "awaiting_review"
        assert snap.payloads("checkpoint.awaiting_review")[-1]["stage"] == "Draft"
        assert last_tool_result(llm.requests[1]) == f"Approved by {REVIEWER} at checkpoint 'Outline': nice"


async def test_without_verification_every_checkpoint_is_auto_approved_and_nothing_pauses(
    db: Database, settings: Settings
) -> None:
    async with fake_llm(call("send_email", **MAIL), call("finish", summary="done")) as llm:
        config = model_settings(settings, llm)
        exe = await new_execution(
            db,
            config,
            MAIL_TASK,
            agent_model="openai:scripted",
            autoDetectCheckpoints=True,
            checkpoints=[{"stage": "End", "verificationQuestion": "ok?"}],
        )
        await run(db, config)
        snap = await snapshot(db, exe)
        assert snap.execution.status == "completed"
        assert sorted(c.status for c in snap.checkpoints) == ["auto_approved", "auto_approved"]
        assert snap.payloads("checkpoint.awaiting_review") == []
        assert len(snap.mails) == 1


async def test_rate_limited_requests_are_retried_and_a_bad_key_fails_clearly(db: Database, settings: Settings) -> None:
    async with fake_llm(
        fail(429, "slow down", **{"retry-after-ms": "10"}),
        fail(429, "slow down", **{"retry-after-ms": "10"}),
        call("finish", summary="made it"),
    ) as llm:
        config = model_settings(settings, llm)
        exe = await new_execution(db, config, "Anything.", agent_model="openai:scripted")
        await run(db, config)
        snap = await snapshot(db, exe)
        assert snap.execution.status == "completed"
        assert len(llm.requests) == 3
    async with fake_llm(fail(401, "Incorrect API key provided")) as llm:
        config = model_settings(settings, llm)
        exe = await new_execution(db, config, "Anything.", agent_model="openai:scripted")
        await run(db, config)
        snap = await snapshot(db, exe)
        assert snap.execution.status == "failed"
        assert snap.execution.error is not None
        assert "HTTP 401" in snap.execution.error and "Incorrect API key" in snap.execution.error
        assert snap.payloads("execution.failed") == [{"status": "failed", "error": snap.execution.error_info}]
        assert snap.execution.error_info == {"code": "provider_failed", "detail": snap.execution.error}
        assert len(llm.requests) == 1  # a bad key is not retried


@pytest.mark.parametrize(
    ("budget", "says"),
    [
        ({"agent_max_steps": 3}, "used 3 of 3 steps"),
        ({"agent_max_tokens": 250}, "of 250 tokens"),
    ],
)
async def test_a_model_that_never_finishes_runs_out_of_budget(
    db: Database, settings: Settings, budget: dict[str, Any], says: str
) -> None:
    turns = [call("list_files") for _ in range(5)]
    async with fake_llm(*turns) as llm:
        config = model_settings(settings, llm, **budget)
        exe = await new_execution(db, config, "Look around.", agent_model="openai:scripted")
        await run(db, config)
        snap = await snapshot(db, exe)
        assert snap.execution.status == "failed"
        assert snap.execution.error is not None and says in snap.execution.error
        assert len(llm.requests) < 5


async def test_unknown_tools_and_bad_arguments_go_back_to_the_model(db: Database, settings: Settings) -> None:
    async with fake_llm(
        call("format_disk"),
        call("write_file", path="only-a-path.md"),
        call("finish", summary="ok"),
    ) as llm:
        config = model_settings(settings, llm)
        exe = await new_execution(db, config, "Try things.", agent_model="openai:scripted")
        await run(db, config)
        snap = await snapshot(db, exe)
        assert snap.execution.status == "completed"
        assert last_tool_result(llm.requests[1]).startswith("Error: there is no tool 'format_disk'")
        assert last_tool_result(llm.requests[2]) == "Error: write_file needs the arguments content."
        assert snap.calls == []


async def test_http_request_to_loopback_is_refused_and_the_model_is_told(db: Database, settings: Settings) -> None:
    async with fake_llm(
        call("http_request", method="GET", url="http://127.0.0.1:9/secret"),
        lambda body: call("finish", summary=last_tool_result(body)),
    ) as llm:
        config = model_settings(settings, llm)
        exe = await new_execution(db, config, "Fetch the secret.", agent_model="openai:scripted")
        await run(db, config)
        snap = await snapshot(db, exe)
        assert snap.execution.status == "completed"
        answer = json.loads(last_tool_result(llm.requests[1]))
        assert answer["error"].startswith("refused:")
        assert [(c.tool, c.status) for c in snap.calls] == [("http_request", "failed")]


async def dies_mid_request(db: Database, config: Settings, exe: str, arrived: asyncio.Event) -> None:
    """A worker claims `exe` and is gone once its request has `arrived` at the server; its lease has run out."""
    got = await claim_execution(db, "worker-1", 30, exe)  # as its wake-up's worker: by id
    assert got is not None
    doomed = asyncio.create_task(ExecutionRunner(config, db, "worker-1", got).run())
    await asyncio.wait_for(arrived.wait(), 10)
    doomed.cancel()
    await asyncio.gather(doomed, return_exceptions=True)
    async with db.transaction() as session:
        await session.execute(sa.update(Execution).where(Execution.id == exe).values(lease_until=utcnow()))


async def test_a_post_cut_off_mid_request_is_not_repeated_blindly(db: Database, settings: Settings) -> None:
    """The worker dies while a POST is in flight: the next worker does not know whether it happened, so a
    human decides; rejecting tells the model it was not repeated."""
    arrived, released = asyncio.Event(), asyncio.Event()
    hits: list[str] = []

    async def hang(request: web.Request) -> web.Response:
        hits.append(await request.text())
        arrived.set()
        await released.wait()  # answers only once the test is over: the worker never hears back
        return web.Response(text="charged")

    async with route_server("/charge", hang) as url:
        try:
            async with fake_llm(
                call("http_request", method="POST", url=url, body='{"amount": 5}'),
                lambda body: call("finish", summary=last_tool_result(body)),
            ) as llm:
                config = model_settings(settings, llm, agent_http_allowlist=parse_allowlist("127.0.0.0/8"))
                exe = await new_execution(
                    db,
                    config,
                    "Charge the customer.",
                    test_mode="with-verification",
                    agent_model="openai:scripted",
                    assignedReviewer=REVIEWER,
                )
                await dies_mid_request(db, config, exe, arrived)
                await run(db, config)
                snap = await snapshot(db, exe)
                assert snap.execution.status == "awaiting_review"
                [awaiting] = snap.payloads("checkpoint.awaiting_review")
                assert awaiting["stage"] == "Outcome unknown after a crash"
                assert awaiting["nextAction"]["args"]["url"] == url
                assert len(hits) == 1
                async with db.transaction() as session:
                    await decide(
                        session,
                        awaiting["checkpointId"],
                        "reject",
                        by=REVIEWER,
                        via=Channel.WEB,
                        comment="It went through; do not charge twice.",
                    )
                await run(db, config)
                snap = await snapshot(db, exe)
                assert snap.execution.status == "completed"
                assert "do not charge twice" in last_tool_result(llm.requests[1])
                assert len(hits) == 1
        finally:
            released.set()  # before the server's cleanup, which waits for the hanging request


async def test_anthropic_models_run_through_anthropics_own_client(
    db: Database, settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with fake_llm(call("write_file", path="a.md", content="hi"), call("finish", summary="wrote a.md")) as llm:
        monkeypatch.setenv("ANTHROPIC_API_KEY", "test-key")
        monkeypatch.setenv("ANTHROPIC_BASE_URL", llm.root)
        exe = await new_execution(db, settings, "Write a.md.", agent_model="anthropic:claude-scripted")
        await run(db, settings)
        snap = await snapshot(db, exe)
        assert snap.execution.status == "completed", snap.execution.error
        assert snap.execution.result == {"summary": "wrote a.md", "output": "wrote a.md", "toolCalls": ["write_file"]}
        # Anthropic's wire format: the tool result goes back as a tool_result block in a user turn.
        results = [
            block
            for message in llm.requests[1]["messages"]
            if isinstance(message["content"], list)
            for block in message["content"]
            if block.get("type") == "tool_result"
        ]
        assert len(results) == 1 and "a.md" in json.dumps(results[0])
        assert "Write a.md." in json.dumps(llm.requests[0]["system"])


# Issue 19: a send_email the service could never send is the model's error to see, never a queued message.
BAD_MAILS = [
    {"to": "a@example.com, b@example.com", "subject": "Hi", "body": "x"},
    {"to": '"a@example.com" <b@example.com>, c@example.com', "subject": "Hi", "body": "x"},
    {"to": "boss@example.com", "subject": "Hi\r\nBcc: victim@example.com", "body": "x"},
    {"to": "not an address", "subject": "Hi", "body": "x"},
]


async def test_a_bad_recipient_or_subject_is_a_tool_error_and_the_run_goes_on(db: Database, settings: Settings) -> None:
    script = [call("send_email", **args) for args in BAD_MAILS]
    async with fake_llm(*script, call("send_email", **MAIL), call("finish", summary="done")) as llm:
        config = model_settings(settings, llm)
        exe = await new_execution(db, config, MAIL_TASK, agent_model="openai:scripted")
        await run(db, config)
        snap = await snapshot(db, exe)
        assert snap.execution.status == "completed", snap.execution.error
        assert [(m.recipient, m.subject) for m in snap.mails] == [("boss@example.com", "Weekly report")]
        assert [c.status for c in snap.calls] == ["failed"] * len(BAD_MAILS) + ["succeeded"]
        told = [json.loads(last_tool_result(request)) for request in llm.requests[1 : len(BAD_MAILS) + 1]]
        assert all(set(answer) == {"error"} for answer in told), told
        assert "exactly one" in told[0]["error"] and "exactly one" in told[1]["error"]
        assert "subject" in told[2]["error"] and "U+000D" in told[2]["error"]
        errors = [p["error"] for p in snap.payloads("tool.result") if "error" in p]
        assert errors == [answer["error"] for answer in told]


async def test_a_call_that_could_never_be_sent_is_not_put_to_the_reviewer(db: Database, settings: Settings) -> None:
    async with fake_llm(call("send_email", **BAD_MAILS[0]), call("finish", summary="gave up")) as llm:
        config = model_settings(settings, llm)
        exe = await new_execution(
            db,
            config,
            MAIL_TASK,
            test_mode="with-verification",
            agent_model="openai:scripted",
            autoDetectCheckpoints=True,
        )
        await run(db, config)
        snap = await snapshot(db, exe)
        assert snap.mails == []
        assert [(c.tool, c.status) for c in snap.calls] == [("send_email", "failed")]
        # The model heard of its mistake at once; the reviewer is asked only at the end, about finishing.
        assert len(llm.requests) == 2 and "exactly one" in last_tool_result(llm.requests[1])
        assert [p["nextAction"]["tool"] for p in snap.payloads("checkpoint.awaiting_review")] == ["finish"]
