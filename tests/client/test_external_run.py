"""Bring your own agent with the Python client: a run driven from the caller's code against a real Vouch
(its worker running beside it, never claiming the run), decided by the reviewer through the API."""

from __future__ import annotations

import threading
from contextlib import closing
from typing import Any

import pytest
from vouch_client import AsyncClient, Client, Conflict, Rejected

from tests.client.conftest import OWNER, Vouch


def external_task() -> dict[str, Any]:
    return {"taskName": "Own agent", "taskDescription": "Send the release mail.", "assignedReviewer": OWNER}


def decide_when_waiting(vouch: Vouch, execution_id: str, decision: str, **fields: Any) -> threading.Thread:
    """The reviewer, in a thread of their own: decides the first checkpoint that waits, seen on the run's live
    stream (which replays the run's events from its start, so one that waits already is seen too)."""

    def review() -> None:
        with Client(vouch.base, vouch.owner.key) as reviewer, closing(reviewer.stream(execution_id)) as events:
            for event in events:
                if event.type == "checkpoint.awaiting_review":
                    reviewer.decide(execution_id, event.payload["checkpointId"], decision, **fields)
                    return
        raise AssertionError("the run ended with no checkpoint waiting")

    thread = threading.Thread(target=review)
    thread.start()
    return thread


def test_a_gated_function_runs_with_the_reviewer_s_edited_arguments(vouch: Vouch) -> None:
    sent: list[dict[str, Any]] = []
    with Client(vouch.base, vouch.owner.key) as client:
        run = client.start_external(external_task())
        run.message("Drafting the release mail")
        run.tool_call("draft", {"version": "2"}, result={"words": 120}, duration_ms=12)
        run.usage("openai:gpt-4o", 1000, 100)

        @run.gated(stage="Send", question="Send this mail?")
        def send_mail(to: str, subject: str = "v2") -> str:
            sent.append({"to": to, "subject": subject})
            return "sent"

        reviewer = decide_when_waiting(vouch, run.execution_id, "approve", edited_args={"subject": "v2.0 is out"})
        assert send_mail("team@example.com") == "sent"
        reviewer.join()
        assert sent == [{"to": "team@example.com", "subject": "v2.0 is out"}]
        run.complete({"output": "mail sent"})
        record = client.status(run.execution_id)
        assert record.status == "completed"
        assert record.metrics.toolCalls == 1 and record.metrics.inputTokens == 1000


def test_a_rejection_raises_and_a_restarted_agent_gets_the_same_checkpoint(vouch: Vouch) -> None:
    with Client(vouch.base, vouch.owner.key) as client:
        run = client.start_external(external_task())
        asked = run.ask("Send", "Send it?", action={"tool": "send_mail", "args": {"to": "a@example.com"}}, key="k1")
        assert asked.decision is None and asked.status == "awaiting_review"
    # The agent's process is gone; the reviewer answers meanwhile.
    decide_when_waiting(vouch, run.execution_id, "reject", comment="wrong list").join()
    with Client(vouch.base, vouch.owner.key) as restarted:
        again = restarted.attach(run.execution_id)
        with pytest.raises(Rejected) as rejected:

            @again.gated(stage="Send", question="Send it?", key="k1")
            def send_mail(to: str) -> None:
                raise AssertionError("a rejected call must not run")

            send_mail("a@example.com")
        assert rejected.value.comment == "wrong list"
        decision = again.checkpoint("Send", "Send it?", key="k1")
        assert decision.checkpointId == asked.checkpointId and decision.decision == "reject"


def test_cancel_reaches_the_agent(vouch: Vouch) -> None:
    with Client(vouch.base, vouch.owner.key) as client:
        run = client.start_external(external_task())
        run.message("working")
        client.cancel(run.execution_id)
        with pytest.raises(Conflict) as refused:
            run.message("still working")
        assert refused.value.code == "execution_cancelled"


async def test_the_async_client_drives_a_run_to_its_end(vouch: Vouch) -> None:
    async with AsyncClient(vouch.base, vouch.owner.key) as client:
        run = await client.start_external(external_task())
        await run.message("hello")

        @run.gated(stage="Publish", question="Publish?")
        async def publish(page: str) -> str:
            return f"published {page}"

        reviewer = decide_when_waiting(vouch, run.execution_id, "approve")
        assert await publish("notes") == "published notes"
        reviewer.join()
        await run.complete({"output": "published"})
        assert (await client.status(run.execution_id)).status == "completed"
