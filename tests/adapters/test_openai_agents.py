"""The OpenAI Agents SDK end to end: a gated tool's call stops the SDK's run at a Vouch checkpoint, the reviewer
decides it through the API while watching the run live, and the decision goes back into the SDK's RunState.

The agent runs in a process of its own with the python of the SDK's venv (agent_venv.py says why), driven by the
SDK's ScriptedModel; the Vouch server runs in this test process."""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path
from typing import Any

import pytest
from vouch_client import AsyncClient

from tests.adapters.helpers import Decision, Reviewer, external_task
from tests.client.conftest import Vouch

AGENT = Path(__file__).with_name("openai_agents_process.py")
MAIL = {"to": "team@example.com", "subject": "v2"}


async def run_agent(python: Path, vouch: Vouch, execution_id: str, cwd: Path) -> dict[str, Any]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    process = await asyncio.create_subprocess_exec(
        str(python), str(AGENT), vouch.base, vouch.owner.key, execution_id,
        cwd=cwd, env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(process.communicate(), 60)
    assert process.returncode == 0, err.decode()
    return dict(json.loads(out.decode().strip().splitlines()[-1]))


@pytest.mark.parametrize(
    ("decision", "sent", "final"),
    [
        (Decision("approve"), [MAIL], "Done: sent to team@example.com: v2"),
        (Decision("approve", edited_args={"subject": "v2 is out"}), [{**MAIL, "subject": "v2 is out"}],
         "Done: sent to team@example.com: v2 is out"),
        (Decision("reject", comment="wrong list"), [], "Done: The reviewer rejected this call: wrong list"),
    ],
    ids=["approve", "edited", "reject"],
)
async def test_a_tool_approval_is_decided_in_vouch(
    openai_agents_venv: Path, vouch: Vouch, tmp_path: Path, decision: Decision, sent: list[dict[str, str]], final: str
) -> None:
    async with AsyncClient(vouch.base, vouch.owner.key) as client:
        run = await client.start_external(external_task())
        reviewer = Reviewer(vouch, run.execution_id, [decision])
        async with reviewer.running():
            outcome = await run_agent(openai_agents_venv, vouch, run.execution_id, tmp_path)

        assert outcome == {"finalOutput": final, "sent": sent}
        action = reviewer.asked[0]["nextAction"]
        assert (reviewer.asked[0]["stage"], action["tool"], action["args"]) == ("Send", "send_mail", MAIL)
        record = await client.status(run.execution_id)
        assert record.status == "completed"
        # The call that ran is in the chat and the metrics, with the arguments it ran with.
        assert record.metrics.toolCalls == len(sent)
