"""LangGraph end to end: a graph's interrupt becomes a Vouch checkpoint, the reviewer decides it through the
API while watching the run live, and the graph resumes with the decision (Command(resume=…))."""

from __future__ import annotations

import asyncio
import json
import sys
import uuid
from pathlib import Path
from typing import Any, TypedDict

import pytest
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, StateGraph
from vouch_client import AsyncClient
from vouch_client.adapters.langgraph import ainvoke, request_approval

from tests.adapters.helpers import Decision, Reviewer, external_task
from tests.client.conftest import Vouch

MAIL = {"to": "team@example.com", "subject": "v2"}


class State(TypedDict, total=False):
    mail: dict[str, Any]
    outcome: str


def mail_graph(sent: list[dict[str, Any]]) -> Any:
    def send(state: State) -> State:
        approval = request_approval("Send", "Send this mail?", tool="send_mail", args=state["mail"])
        if not approval["approved"]:
            return {"outcome": f"not sent: {approval['comment']}"}
        sent.append(approval["args"])
        return {"outcome": f"sent to {approval['args']['to']}"}

    builder = StateGraph(State)
    builder.add_node("send", send)
    builder.add_edge(START, "send")
    builder.add_edge("send", END)
    return builder.compile(checkpointer=InMemorySaver())


@pytest.mark.parametrize(
    ("decision", "sent_args", "outcome"),
    [
        (Decision("approve"), MAIL, "sent to team@example.com"),
        (Decision("approve", edited_args={"to": "leads@example.com"}), {**MAIL, "to": "leads@example.com"},
         "sent to leads@example.com"),
        (Decision("reject", comment="wrong list"), None, "not sent: wrong list"),
    ],
    ids=["approve", "edited", "reject"],
)
async def test_an_interrupt_is_decided_in_vouch(
    vouch: Vouch, decision: Decision, sent_args: dict[str, Any] | None, outcome: str
) -> None:
    sent: list[dict[str, Any]] = []
    async with AsyncClient(vouch.base, vouch.owner.key) as client:
        run = await client.start_external(external_task())
        reviewer = Reviewer(vouch, run.execution_id, [decision])
        config = {"configurable": {"thread_id": str(uuid.uuid4())}}
        async with reviewer.running():
            final = await ainvoke(run, mail_graph(sent), {"mail": MAIL}, config)  # type: ignore[arg-type]
        await run.complete({"output": final["outcome"]})

        assert final["outcome"] == outcome
        assert sent == ([sent_args] if sent_args else [])
        assert reviewer.asked[0]["stage"] == "Send"
        action = reviewer.asked[0]["nextAction"]
        assert (action["tool"], action["args"]) == ("send_mail", MAIL)
        record = await client.status(run.execution_id)
        assert record.status == "completed"
        # A rejected checkpoint waits again for the agent's revision (pending); an approved one is done.
        assert [c.status for c in record.checkpoints if c.stage == "Send"] == [
            "approved" if decision.decision == "approve" else "pending"
        ]


PROCESS = Path(__file__).with_name("langgraph_process.py")


async def test_a_restarted_agent_resumes_its_thread_with_the_decision_made_meanwhile(
    vouch: Vouch, tmp_path: Path
) -> None:
    sent = tmp_path / "sent.jsonl"
    files = [str(tmp_path / "graph.sqlite"), str(uuid.uuid4()), str(sent)]
    async with AsyncClient(vouch.base, vouch.owner.key) as client:
        run = await client.start_external(external_task())
        argv = [str(PROCESS), vouch.base, vouch.owner.key, run.execution_id, *files]
        first = await asyncio.create_subprocess_exec(
            sys.executable, *argv, "start", cwd=tmp_path, stdout=asyncio.subprocess.DEVNULL
        )
        # The agent's process dies while its checkpoint waits for the reviewer.
        events = client.stream(run.execution_id)
        waiting = await asyncio.wait_for(anext(e async for e in events if e.type == "checkpoint.awaiting_review"), 60)
        await events.aclose()
        first.kill()
        await first.wait()
        await client.decide(run.execution_id, waiting.payload["checkpointId"], "approve",
                            edited_args={"subject": "v2 is out"})

        second = await asyncio.create_subprocess_exec(
            sys.executable, *argv, "resume", cwd=tmp_path,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        )
        try:
            out, err = await asyncio.wait_for(second.communicate(), 60)
        finally:
            if second.returncode is None:  # timed out: a new checkpoint waits, and no one decides it
                second.kill()
                await second.wait()
        assert second.returncode == 0, err.decode()

        assert json.loads(out.decode().strip().splitlines()[-1])["outcome"] == "sent to team@example.com: v2 is out"
        assert [json.loads(line) for line in sent.read_text().splitlines()] == [{**MAIL, "subject": "v2 is out"}]
        record = await client.status(run.execution_id)
        assert record.status == "completed"
        # One checkpoint, asked by both processes under the same key, decided once.
        assert [(c.checkpointId, c.status) for c in record.checkpoints if c.stage == "Send"] == [
            (waiting.payload["checkpointId"], "approved")
        ]
        kinds = [e.type async for e in client.stream(run.execution_id)]
        assert (kinds.count("checkpoint.awaiting_review"), kinds.count("checkpoint.decided")) == (1, 1)
