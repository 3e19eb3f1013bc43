"""`core.events.append_events` and `add_numbered_events` take typed events: mypy refuses a payload that does not
match its event type (core/event_payloads.py's TypedEvent), so callers are checked as `append_event`'s are."""

from __future__ import annotations

from pathlib import Path

from mypy import api as mypy_api

ROOT = Path(__file__).resolve().parents[2]

CALLER = """
from datetime import datetime
from sqlalchemy.ext.asyncio import AsyncSession
from core.event_payloads import AgentMessage, MailFailed, TypedEvent
from core.events import add_numbered_events, append_events
from core.vocabulary import EventType


async def good(session: AsyncSession, at: datetime) -> None:
    said: AgentMessage = {"text": "hello"}
    await append_events(session, "exe_1", [(EventType.AGENT_MESSAGE, said)])
    events: list[TypedEvent] = [(EventType.AGENT_MESSAGE, said)]
    await add_numbered_events(session, "exe_1", 2, events, at)


async def bad(session: AsyncSession, at: datetime) -> None:
    said: AgentMessage = {"text": "hello"}
    failed: MailFailed = {"messageId": "m", "to": "a@b", "subject": "s", "reason": "r", "attempts": 1}
    await append_events(session, "exe_1", [(EventType.TOOL_CALL, said)])  # line 19: the wrong payload
    await add_numbered_events(session, "exe_1", 2, [(EventType.AGENT_MESSAGE, failed)], at)  # line 20
    await append_events(session, "exe_1", [("agent.message", {"text": "untyped"})])  # line 21
"""


def test_mypy_refuses_an_event_whose_payload_is_not_its_types(tmp_path: Path) -> None:
    caller = tmp_path / "caller.py"
    caller.write_text(CALLER)
    out, _err, status = mypy_api.run(["--strict", "--config-file", str(ROOT / "pyproject.toml"), str(caller)])
    errors = sorted({int(line.split(":")[1]) for line in out.splitlines() if ": error:" in line})
    assert (status, errors) == (1, [19, 20, 21]), out
