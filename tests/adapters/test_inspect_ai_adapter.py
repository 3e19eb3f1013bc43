"""Inspect AI's tool approvals routed to Vouch: an eval on Inspect's own offline `mockllm/model` (custom outputs
that call a mail tool) against a real Vouch, its approval policy sending `send_mail` to `vouch_approver`; the
reviewer decides through the API while the sample waits. Inspect's logs go to the test's tmp path."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from inspect_ai import Task, eval
from inspect_ai.approval import ApprovalPolicy, auto_approver
from inspect_ai.dataset import Sample
from inspect_ai.log import EvalLog
from inspect_ai.model import ChatMessageTool, ModelOutput, ModelUsage, get_model
from inspect_ai.scorer import includes
from inspect_ai.solver import generate, use_tools
from inspect_ai.tool import Tool, tool
from vouch_client import Client
from vouch_client.adapters.inspect_ai import vouch_approver

from core.settings import Settings
from tests.adapters.reviewing_in_vouch import external_task, review, running_vouch
from tests.client.conftest import Vouch

# Two warnings of Inspect 0.3.285's own, which a plain eval() with a tool and no approver (nor Vouch) raises too:
# its model retries use tenacity's `wait_exponential_jitter(initial=...)`, deprecated in tenacity 9.2, and it
# leaves one anyio memory stream of a tool call's unclosed for the garbage collector.
pytestmark = [
    pytest.mark.filterwarnings("ignore:The 'initial' parameter is deprecated:DeprecationWarning"),
    pytest.mark.filterwarnings("ignore:Unclosed <MemoryObjectReceiveStream:ResourceWarning"),
]


@pytest.fixture
def vouch(settings: Settings, monkeypatch: pytest.MonkeyPatch) -> Iterator[Vouch]:
    with running_vouch(settings) as running:
        # The approver reads its key from the environment only (Inspect logs an approver's arguments).
        monkeypatch.setenv("VOUCH_API_KEY", running.owner.key)
        yield running


def _used(output: ModelOutput) -> ModelOutput:
    # With its usage given, mockllm counts no tokens (which would fetch tiktoken's encoding from the network).
    output.usage = ModelUsage(input_tokens=20, output_tokens=5, total_tokens=25)
    return output


def mail_call(call_id: str, **args: str) -> ModelOutput:
    return _used(ModelOutput.for_tool_call("mockllm/model", "send_mail", args, tool_call_id=call_id,
                                           content=f"Sending the mail ({call_id})"))


class MailEval:
    """One sample whose model calls `send_mail` (the risky tool, approved in Vouch) and `draft` (auto-approved)."""

    def __init__(self, *outputs: ModelOutput) -> None:
        self.sent: list[dict[str, str]] = []
        self.outputs = [*outputs, _used(ModelOutput.from_content("mockllm/model", "done"))]

    def run(self, vouch: Vouch, execution_id: str, log_dir: Path) -> EvalLog:
        sent = self.sent

        @tool
        def send_mail() -> Tool:
            async def execute(to: str, subject: str) -> str:
                """Send a mail.

                Args:
                    to: The recipient.
                    subject: The subject.
                """
                sent.append({"to": to, "subject": subject})
                return f"sent to {to}: {subject}"

            return execute

        @tool
        def draft() -> Tool:
            async def execute(text: str) -> str:
                """Draft a mail.

                Args:
                    text: What it says.
                """
                return f"drafted: {text}"

            return execute

        task = Task(
            dataset=[Sample(input="Mail the v2 note to the team", target="done")],
            solver=[use_tools(send_mail(), draft()), generate()],
            scorer=includes(),
        )
        policies = [
            ApprovalPolicy(vouch_approver(execution_id, question="Send this mail?", base_url=vouch.base), "send_mail"),
            ApprovalPolicy(auto_approver(), "*"),
        ]
        model = get_model("mockllm/model", custom_outputs=self.outputs)
        [log] = eval(task, model=model, approval=policies, log_dir=str(log_dir), display="none")
        # Inspect's unclosed stream (see pytestmark) is collected here, under this module's filter, not in a
        # later test's.
        gc.collect()
        return log


def tool_messages(log: EvalLog) -> list[ChatMessageTool]:
    assert log.samples is not None
    return [message for message in log.samples[0].messages if isinstance(message, ChatMessageTool)]


def test_an_approval_and_an_edited_approval_run_the_calls_the_reviewer_let_through(
    vouch: Vouch, tmp_path: Path
) -> None:
    with Client(vouch.base, vouch.owner.key) as client:
        run = client.start_external(external_task("Inspect, approved"))
        mail = MailEval(
            _used(ModelOutput.for_tool_call("mockllm/model", "draft", {"text": "v2 is out"}, tool_call_id="d-1")),
            mail_call("m-1", to="lee@example.com", subject="v2 (draft)"),
            mail_call("m-2", to="team@example.com", subject="v2"),
        )
        reviewer = review(
            vouch, run.execution_id,
            {"decision": "approve"},
            {"decision": "approve", "edited_args": {"subject": "v2 is out"}, "comment": "nicer subject"},
        )
        log = mail.run(vouch, run.execution_id, tmp_path)
        assert log.status == "success", log.error
        decided = reviewer.finish()

        assert mail.sent == [{"to": "lee@example.com", "subject": "v2 (draft)"},
                             {"to": "team@example.com", "subject": "v2 is out"}]
        # Only the risky tool reached the reviewer, with the model's own arguments and what it said alongside.
        assert [(d["stage"], d["nextAction"]["args"]) for d in decided] == [
            ("send_mail", {"to": "lee@example.com", "subject": "v2 (draft)"}),
            ("send_mail", {"to": "team@example.com", "subject": "v2"}),
        ]
        assert decided[0]["description"] == "Sending the mail (m-1)"
        assert decided[0]["verificationQuestion"] == "Send this mail?"
        run.complete({"output": "mail sent"})
        record = client.status(run.execution_id)
        assert record.status == "completed"
        assert [c.status for c in record.checkpoints] == ["approved", "approved"]


def test_a_rejection_keeps_the_call_from_running_and_tells_the_model_why(vouch: Vouch, tmp_path: Path) -> None:
    with Client(vouch.base, vouch.owner.key) as client:
        run = client.start_external(external_task("Inspect, rejected"))
        mail = MailEval(mail_call("m-1", to="everyone@example.com", subject="v2"))
        reviewer = review(vouch, run.execution_id, {"decision": "reject", "comment": "Not to everyone"})
        log = mail.run(vouch, run.execution_id, tmp_path)
        assert log.status == "success", log.error
        reviewer.finish()

        assert mail.sent == []
        [answer] = tool_messages(log)
        assert answer.error is not None and "Not to everyone" in answer.error.message
        # Rejected once, the stage may be asked again (maxRevisions): the rejection is its attempt's record.
        [checkpoint] = client.status(run.execution_id).checkpoints
        assert [(a.decision, a.comment) for a in checkpoint.attempts] == [("reject", "Not to everyone")]


def test_an_execution_cancelled_in_vouch_ends_the_sample(vouch: Vouch, tmp_path: Path) -> None:
    with Client(vouch.base, vouch.owner.key) as client:
        run = client.start_external(external_task("Inspect, cancelled"))
        client.cancel(run.execution_id)
        mail = MailEval(mail_call("m-1", to="team@example.com", subject="v2"))
        log = mail.run(vouch, run.execution_id, tmp_path)

        assert mail.sent == []
        assert log.samples is not None
        events: list[Any] = [e for e in log.samples[0].events if e.event == "approval"]
        assert [(e.decision, e.explanation) for e in events] == [
            ("terminate", "The Vouch execution ended (execution_cancelled).")
        ]
