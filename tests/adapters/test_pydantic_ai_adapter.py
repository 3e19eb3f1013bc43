"""pydantic-ai's deferred tool approvals answered in Vouch: an agent on pydantic-ai's own offline FunctionModel,
whose mail tool needs approval, against a real Vouch; the reviewer decides through the API."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest
from pydantic_ai import Agent, DeferredToolRequests, RunContext
from pydantic_ai.messages import ModelMessage, ModelRequest, ModelResponse, TextPart, ToolCallPart, ToolReturnPart
from pydantic_ai.models.function import AgentInfo, FunctionModel
from vouch_client import AsyncClient, Client
from vouch_client.adapters.pydantic_ai import answer_approvals, answer_approvals_sync, approvals_capability

from core.settings import Settings
from tests.adapters.reviewing_in_vouch import external_task, review, running_vouch
from tests.client.conftest import OWNER, Vouch

PROPOSED = {"to": "team@example.com", "subject": "v2"}


@pytest.fixture
def vouch(settings: Settings) -> Iterator[Vouch]:
    with running_vouch(settings) as running:
        yield running


@pytest.fixture
def sync_loop(vouch: Vouch) -> Iterator[None]:
    """The loop `agent.run_sync` runs on: it takes the thread's current one, making and leaving one if there is
    none, so the test gives it one and closes it. After `vouch`, whose set-up (asyncio.run) unsets the loop."""
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    yield
    asyncio.set_event_loop(None)
    loop.close()


class MailAgent:
    """An agent whose model (a FunctionModel) asks to send one mail, then reports what the tool answered."""

    def __init__(self, capabilities: list[Any] | None = None) -> None:
        self.sent: list[dict[str, Any]] = []
        self.tool_answers: list[Any] = []
        self.seen_metadata: list[Any] = []
        self.agent = Agent(
            FunctionModel(self._model), output_type=[str, DeferredToolRequests], capabilities=capabilities or []
        )

        @self.agent.tool(requires_approval=True)
        def send_mail(ctx: RunContext[None], to: str, subject: str) -> str:
            self.seen_metadata.append(ctx.tool_call_metadata)
            self.sent.append({"to": to, "subject": subject})
            return f"sent to {to}: {subject}"

    def _model(self, messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        returns = [
            part for message in messages if isinstance(message, ModelRequest)
            for part in message.parts if isinstance(part, ToolReturnPart)
        ]
        if returns:
            self.tool_answers = [part.content for part in returns]
            return ModelResponse(parts=[TextPart(f"the tool said: {returns[-1].content}")])
        return ModelResponse(parts=[ToolCallPart("send_mail", dict(PROPOSED), tool_call_id="call-mail-1")])


@pytest.mark.usefixtures("sync_loop")
def test_an_approval_with_edited_arguments_runs_the_tool_with_them(vouch: Vouch) -> None:
    mail = MailAgent()
    with Client(vouch.base, vouch.owner.key) as client:
        run = client.start_external(external_task("pydantic-ai, edited"))
        first = mail.agent.run_sync("Mail the v2 note to the team")
        assert isinstance(first.output, DeferredToolRequests) and mail.sent == []

        reviewer = review(vouch, run.execution_id, {"decision": "approve", "edited_args": {"subject": "v2 is out"}})
        answers = answer_approvals_sync(run, first.output)
        decided = reviewer.finish()
        second = mail.agent.run_sync(message_history=first.all_messages(), deferred_tool_results=answers)

        assert mail.sent == [{"to": "team@example.com", "subject": "v2 is out"}]
        assert second.output == "the tool said: sent to team@example.com: v2 is out"
        # The reviewer was shown the model's own call, under the tool's name as the stage.
        assert decided[0]["stage"] == "send_mail"
        action = decided[0]["nextAction"]
        assert (action["tool"], action["args"]) == ("send_mail", PROPOSED)
        assert mail.seen_metadata[0]["vouch"]["by"] == OWNER
        run.complete({"output": second.output})
        assert client.status(run.execution_id).status == "completed"


async def test_a_rejection_inside_the_run_gives_the_model_the_reviewer_s_comment(vouch: Vouch) -> None:
    async with AsyncClient(vouch.base, vouch.owner.key) as client:
        run = await client.start_external(external_task("pydantic-ai, rejected"))
        mail = MailAgent(capabilities=[approvals_capability(run, question="Send this mail?")])
        reviewer = review(vouch, run.execution_id, {"decision": "reject", "comment": "Wrong list: ask Lee first"})
        result = await mail.agent.run("Mail the v2 note to the team")
        decided = reviewer.finish()

        assert mail.sent == []
        assert mail.tool_answers == ["Wrong list: ask Lee first"]
        assert result.output == "the tool said: Wrong list: ask Lee first"
        assert decided[0]["verificationQuestion"] == "Send this mail?"


async def test_an_approval_as_proposed_and_a_restarted_agent_gets_it_again_without_a_second_review(
    vouch: Vouch,
) -> None:
    mail = MailAgent()
    async with AsyncClient(vouch.base, vouch.owner.key) as client:
        run = await client.start_external(external_task("pydantic-ai, approved"))
        first = await mail.agent.run("Mail the v2 note to the team")
        assert isinstance(first.output, DeferredToolRequests)
        reviewer = review(vouch, run.execution_id, {"decision": "approve"})
        answers = await answer_approvals(run, first.output)
        reviewer.finish()
    # The agent's process restarts and answers the same requests again: the decision made, no new checkpoint.
    async with AsyncClient(vouch.base, vouch.owner.key) as restarted:
        async with asyncio.timeout(30):  # a second checkpoint would wait for a reviewer who is gone
            again = await answer_approvals(restarted.attach(run.execution_id), first.output)
        assert again.approvals == answers.approvals
        second = await mail.agent.run(message_history=first.all_messages(), deferred_tool_results=again)
        assert mail.sent == [PROPOSED]
        assert second.output == "the tool said: sent to team@example.com: v2"
        record = await restarted.status(run.execution_id)
        assert [c.status for c in record.checkpoints] == ["approved"]


def test_the_client_loads_no_framework_until_an_adapter_is_imported() -> None:
    probe = (
        "import sys, vouch_client, vouch_client.adapters\n"
        "print(sorted({'pydantic_ai', 'inspect_ai'} & {name.split('.')[0] for name in sys.modules}))"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=True)
    assert done.stdout.strip() == "[]"
