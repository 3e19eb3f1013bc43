"""An OpenAI Agents SDK agent, run by test_openai_agents.py with the python of the SDK's own venv
(agent_venv.py): `python openai_agents_process.py <url> <key> <execution id>`. There `agents` is the SDK, and
nothing of the Vouch server is installed, as in a user's agent environment.

The model is the SDK's own ScriptedModel (no network): it asks to send one mail, then answers with what the
tool returned, or with the rejection the SDK passed it. Prints what happened as one JSON line."""

from __future__ import annotations

import asyncio
import json
import sys
from typing import Any

from agents.testing import ModelStep, ScriptedModel, assistant_message, function_call
from agents.testing.model import ModelCall
from vouch_client import AsyncClient
from vouch_client.adapters.openai_agents import VouchApprovals

from agents import Agent, RunConfig, function_tool

SENT: list[dict[str, str]] = []


@function_tool
def send_mail(to: str, subject: str) -> str:
    """Send a mail."""
    SENT.append({"to": to, "subject": subject})
    return f"sent to {to}: {subject}"


def last_tool_output(call: ModelCall) -> str:
    outputs = [item for item in call.input if isinstance(item, dict) and item.get("type") == "function_call_output"]
    return str(outputs[-1]["output"])


async def main(base: str, key: str, execution_id: str) -> None:
    model = ScriptedModel([
        [function_call("send_mail", {"to": "team@example.com", "subject": "v2"}, call_id="call-1")],
        ModelStep.respond(lambda call: [assistant_message(f"Done: {last_tool_output(call)}")]),
    ])
    async with AsyncClient(base, key) as vouch:
        run = vouch.attach(execution_id)
        approvals = VouchApprovals(run)
        agent = Agent(name="Mailer", model=model,
                      tools=[approvals.gate(send_mail, stage="Send", question="Send this mail?")])
        result = await approvals.run(agent, "Mail the team about v2", run_config=RunConfig(tracing_disabled=True))
        await run.complete({"output": result.final_output})
    model.assert_complete()
    outcome: dict[str, Any] = {"finalOutput": result.final_output, "sent": SENT}
    print(json.dumps(outcome))


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:4]))
