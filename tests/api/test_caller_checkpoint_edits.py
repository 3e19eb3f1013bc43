"""A caller's checkpoint (the create body's `checkpoints`) of a model agent's run holds its mail until reviewed: an
approval with edited arguments sends the mail as edited, a rejection's comment goes back to the model and nothing is
sent. Real runs: created over the API, carried out by the in-process worker against the local OpenAI-compatible
server, decided over the API, and the mail seen where it arrives, an SMTP server (aiosmtpd)."""

from __future__ import annotations

import asyncio
import html
import json
from collections.abc import AsyncIterator
from email import message_from_bytes, policy
from email.message import EmailMessage
from typing import Any

import pytest
import sqlalchemy as sa

from core.links import chat_view_token
from core.models import Event, MailMessage, ToolCall
from core.settings import Settings
from tests.api.helpers import account, create_ok, decide, has_status, paused_at, task, wait_for
from tests.conftest import Service
from tests.review.mail_support import Sink, smtp_sink
from tests.support.fake_llm import Answer, FakeLLM, call, fake_llm, last_tool_result
from tests.support.model_service import model_service
from tests.support.waiting import until

OWNER = "owner@example.com"
REVIEWER = "reviewer@example.com"
MAIL = {"to": "boss@example.com", "subject": "Weekly report", "body": "All green."}
EDITED_SUBJECT = "Weekly report (final)"
REVISED = {**MAIL, "subject": "Weekly report, as you asked"}
COMMENT = "Not that subject.\nSay it is what I asked for."
SEND_IT = {"stage": "Send it?", "verificationQuestion": "May the report go to the boss?"}


def scripted(body: dict[str, Any]) -> Answer:
    """Sends the report; after a rejection sends it again with a revised subject; after a sent mail, finishes."""
    if not any(message["role"] == "tool" for message in body["messages"]):
        return Answer(text="Sending the report.", tool_calls=[("send_email", MAIL)])
    if last_tool_result(body).startswith("Rejected"):
        return call("send_email", **REVISED)
    return call("finish", summary="Sent.")


@pytest.fixture
async def smtp() -> AsyncIterator[tuple[Sink, int]]:
    with smtp_sink(asyncio.get_running_loop()) as found:
        yield found


@pytest.fixture
def sink(smtp: tuple[Sink, int]) -> Sink:
    return smtp[0]


@pytest.fixture
async def llm() -> AsyncIterator[FakeLLM]:
    async with fake_llm(then=scripted) as server:
        yield server


@pytest.fixture
async def served(settings: Settings, llm: FakeLLM, smtp: tuple[Sink, int]) -> AsyncIterator[Service]:
    url = f"smtp://127.0.0.1:{smtp[1]}"
    async with model_service(settings, llm, smtp_url=url, worker_poll_seconds=0.2) as service:
        yield service


async def mails_to(sink: Sink, recipient: str, count: int) -> list[EmailMessage]:
    """The messages the SMTP server received for `recipient`, once there are `count` of them."""

    async def arrived() -> list[EmailMessage] | None:
        found = [
            message_from_bytes(envelope.content, policy=policy.default)
            for envelope in list(sink.envelopes)
            if envelope.rcpt_tos == [recipient]
        ]
        return [m for m in found if isinstance(m, EmailMessage)] if len(found) >= count else None

    return await until(arrived, timeout=15)


async def started(service: Service) -> tuple[str, str, str]:
    """A model run with the caller's checkpoint, paused there with the mail: (owner key, execution, checkpoint)."""
    owner = await account(service, OWNER, "eval:manage")
    body = task(
        taskDescription="E-mail the weekly report to boss@example.com.",
        agentModel="openai:scripted",
        testMode="with-verification",
        checkpoints=[SEND_IT],
        assignedReviewer=REVIEWER,
    )
    execution_id = await create_ok(service, owner.key, body)
    record = await wait_for(service, owner.key, execution_id, paused_at(0))
    (checkpoint,) = record["checkpoints"]
    assert (checkpoint["origin"], checkpoint["nextAction"]["tool"]) == ("caller", "send_email")
    assert checkpoint["nextAction"]["args"] == MAIL and checkpoint["nextAction"]["editable"] is True
    return owner.key, execution_id, checkpoint["checkpointId"]


async def events_of(service: Service, execution_id: str, kind: str) -> list[dict[str, Any]]:
    async with service.db.reading() as session:
        rows = await session.scalars(
            sa.select(Event.payload).where(Event.execution_id == execution_id, Event.type == kind).order_by(Event.seq)
        )
        return list(rows)


async def test_an_edited_approval_sends_the_edited_mail(served: Service, llm: FakeLLM, sink: Sink) -> None:
    key, execution_id, checkpoint_id = await started(served)
    reviewer = await account(served, REVIEWER, "eval:manage")
    code, answer = await decide(
        served, reviewer.key, execution_id, checkpoint_id,
        {"decision": "approve", "editedArgs": {"subject": EDITED_SUBJECT}},
    )  # fmt: skip
    assert code == 200, answer
    assert answer["decision"]["editedArgs"] == {"subject": EDITED_SUBJECT}
    await wait_for(served, key, execution_id, has_status("completed"))

    # Where the mail arrives: the edited subject, the rest as the model wrote it.
    (sent,) = await mails_to(sink, MAIL["to"], 1)
    assert sent["Subject"] == EDITED_SUBJECT
    text = sent.get_body(preferencelist=("plain",))
    assert text is not None and text.get_content().strip() == MAIL["body"]

    # The record: the call ran with the edits and keeps the model's own arguments; its result says what was sent.
    async with served.db.reading() as session:
        (mail_call,) = await session.scalars(sa.select(ToolCall).where(ToolCall.execution_id == execution_id))
    assert (mail_call.args, mail_call.proposed_args) == ({**MAIL, "subject": EDITED_SUBJECT}, MAIL)
    (result,) = await events_of(served, execution_id, "tool.result")
    assert result["toolCallId"] == mail_call.id and result["result"]["subject"] == EDITED_SUBJECT
    (decided,) = await events_of(served, execution_id, "checkpoint.decided")
    assert (decided["editedArgs"], decided["originalArgs"]) == ({"subject": EDITED_SUBJECT}, MAIL)
    # The model is told what it sent and which argument the reviewer changed.
    told = json.loads(last_tool_result(llm.requests[-1]))
    assert told["subject"] == EDITED_SUBJECT
    assert told["reviewerEdited"] == {"subject": {"proposed": MAIL["subject"], "approved": EDITED_SUBJECT}}

    # The chat shows the call's result as sent.
    token = chat_view_token(served.settings.secret_key, execution_id)
    page = await (await served.client.get(f"/chat/{execution_id}?token={token}")).get_data(as_text=True)
    tool_item = page.split(f'data-tool-call-id="{mail_call.id}"', 1)[1].split("</li>", 1)[0]
    result_text = tool_item.split('data-slot="resultText">', 1)[1].split("</pre>", 1)[0]
    assert json.loads(html.unescape(result_text))["subject"] == EDITED_SUBJECT


async def test_a_rejection_sends_nothing_and_the_model_revises_from_the_comment(
    served: Service, llm: FakeLLM, sink: Sink
) -> None:
    """docs/agents.md: rejected, the call does not run and the model reads the comment (verbatim, as the call's
    result); its next try is the checkpoint's next attempt."""
    key, execution_id, checkpoint_id = await started(served)
    reviewer = await account(served, REVIEWER, "eval:manage")
    code, answer = await decide(
        served, reviewer.key, execution_id, checkpoint_id, {"decision": "reject", "comment": COMMENT}
    )
    assert code == 200, answer

    def second_attempt(record: dict[str, Any]) -> bool:
        return paused_at(0)(record) and record["checkpoints"][0]["attempt"] == 2

    record = await wait_for(served, key, execution_id, second_attempt)
    assert record["checkpoints"][0]["nextAction"]["args"] == REVISED
    told = last_tool_result(llm.requests[-1])
    assert told == f"Rejected by the reviewer ({REVIEWER}). Their comment:\n{COMMENT}"
    async with served.db.reading() as session:
        queued = list(await session.scalars(sa.select(MailMessage).where(MailMessage.recipient == MAIL["to"])))
        calls = list(await session.scalars(sa.select(ToolCall).where(ToolCall.execution_id == execution_id)))
    assert queued == []
    assert [(c.status, c.args) for c in sorted(calls, key=lambda c: c.step_index)] == [
        ("rejected", MAIL), ("proposed", REVISED)
    ]  # fmt: skip

    code, answer = await decide(served, reviewer.key, execution_id, checkpoint_id, {"decision": "approve"})
    assert code == 200, answer
    await wait_for(served, key, execution_id, has_status("completed"))
    (sent,) = await mails_to(sink, MAIL["to"], 1)
    assert sent["Subject"] == REVISED["subject"]
    async with served.db.reading() as session:
        queued = list(await session.scalars(sa.select(MailMessage).where(MailMessage.recipient == MAIL["to"])))
    assert [m.subject for m in queued] == [REVISED["subject"]]
