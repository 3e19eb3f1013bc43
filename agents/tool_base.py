"""What every tool is: a name, whether it acts on the world, its schema, and two phases.

A tool runs in two phases so that a resumed execution never repeats an effect:
`perform` does slow or outside work with no transaction open; `record` writes the
effect and result inside the step's transaction, together with the step's progress.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, ClassVar

from sqlalchemy.ext.asyncio import AsyncSession

from core.event_payloads import TypedEvent
from core.events import Companion
from core.settings import Settings


class ToolFailed(Exception):
    """The tool could not do what was asked; the message goes back to the model as the call's result."""


@dataclass
class ToolContext:
    session: AsyncSession
    settings: Settings
    execution_id: str
    tool_call_id: str
    started_at: datetime


class Tool:
    name: ClassVar[str]
    acts_on_world: ClassVar[bool] = False
    # What a model sees: a description and the JSON schema of the arguments.
    description: ClassVar[str] = ""
    parameters: ClassVar[dict[str, Any]] = {"type": "object", "properties": {}}
    # True when `perform` works outside the database (waits, calls a URL): the step then needs a transaction
    # before it (the intent) and one after (the result). Otherwise the whole step is one transaction.
    performs_outside: ClassVar[bool] = False

    def repeatable(self, args: dict[str, Any]) -> bool:
        """Whether `perform` may run again when a crash left its outcome unknown.

        True for tools whose effect is written by `record` in the step's transaction (it happened
        exactly when the result is recorded) or that change nothing outside. A tool that changes the
        outside world in `perform` answers False: a human then decides whether to run it again.
        """
        return True

    def argument_problem(self, args: dict[str, Any]) -> str | None:
        """Why these arguments could never work (the call then fails with this, and no reviewer is asked to
        approve it), or None."""
        return None

    async def perform(self, settings: Settings, args: dict[str, Any], started_at: datetime) -> Any:
        """Work done outside any transaction."""
        return None

    async def record(self, ctx: ToolContext, args: dict[str, Any], outcome: Any) -> dict[str, Any]:
        raise NotImplementedError

    def single_write(self, execution_id: str, args: dict[str, Any], now: datetime) -> SingleWrite | None:
        """This call's whole effect as one row, when it is that (by default it is not: `record` writes it)."""
        return None


@dataclass(frozen=True)
class SingleWrite:
    """A call whose effect is one row, known before it is written, and whose result needs nothing read: the
    step that makes it can be one statement with its progress and its events (agents/tool_calls.py)."""

    row: Companion
    result: dict[str, Any]


def schema(properties: dict[str, Any], required: list[str]) -> dict[str, Any]:
    return {"type": "object", "properties": properties, "required": required, "additionalProperties": False}


@dataclass(frozen=True)
class InPlaceStep:
    index: int
    tool: str
    args: dict[str, Any]
    provider_call_id: str | None = None
    # Events that belong before the tool call's (the agent's message about it).
    before: tuple[TypedEvent, ...] = ()
