"""The bodies an external agent sends (api/external.py): events, checkpoints, its completion.

Every field says what it is for: the OpenAPI document is built from these models (api/openapi_schemas.py).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field, StrictInt, StringConstraints

from api.schemas import _Strict

MAX_EVENTS = 100
_KEY = "The agent's own name for this, unique in the execution: sent again (a retry), it is not added twice."
Key = Annotated[str, StringConstraints(min_length=1, max_length=200), Field(description=_KEY)]
Name = Annotated[str, StringConstraints(strip_whitespace=True, min_length=1, max_length=200)]
Text = Annotated[str, StringConstraints(max_length=20000)]
Count = Annotated[StrictInt, Field(ge=0)]
Millis = Annotated[float, Field(ge=0, description="How long it took, in milliseconds (counted as agent time).")]


class ExternalMessageIn(_Strict):
    """Something the agent says; the chat shows it as the agent's message."""

    key: Key
    type: Literal["message"] = Field(description="`message`.")
    text: Annotated[str, StringConstraints(min_length=1, max_length=20000)] = Field(description="What it says.")


class ExternalToolCallIn(_Strict):
    """A tool call the agent made, with its outcome: the chat shows the call and its result."""

    key: Key
    type: Literal["tool_call"] = Field(description="`tool_call`.")
    tool: Name = Field(description="The tool's name; counted per tool in the metrics.")
    args: dict[str, Any] = Field(default_factory=dict, description="The arguments it was called with.")
    result: Any = Field(default=None, description="What it returned (any JSON).")
    error: Text | None = Field(default=None, description="Why it failed, when it did.")
    durationMs: Millis = 0.0


class ExternalUsageIn(_Strict):
    """A model request the agent made: its tokens, and its price when the model's is known."""

    key: Key
    type: Literal["usage"] = Field(description="`usage`.")
    model: Name = Field(description="`provider:model` (`openai:gpt-4o`) or an operator's profile name.")
    inputTokens: Count = Field(default=0, description="Tokens sent.")
    outputTokens: Count = Field(default=0, description="Tokens received.")
    durationMs: Millis = 0.0


ExternalEvent = Annotated[ExternalMessageIn | ExternalToolCallIn | ExternalUsageIn, Field(discriminator="type")]


class ExternalEventsIn(_Strict):
    events: list[ExternalEvent] = Field(
        min_length=1, max_length=MAX_EVENTS, description=f"1 to {MAX_EVENTS} events, in the order they happened."
    )


class ExternalActionIn(_Strict):
    """The call the checkpoint gates; the reviewer may approve it with edited arguments."""

    tool: Name = Field(description="The tool about to be called.")
    args: dict[str, Any] = Field(default_factory=dict, description="Its arguments, as the reviewer will see them.")


class ExternalCheckpointIn(_Strict):
    key: Key
    stage: Name = Field(description="The stage; a caller checkpoint of this stage, still to be reached, is used.")
    description: Text = Field(default="", description="What happens at this stage.")
    verificationQuestion: Annotated[
        str, StringConstraints(strip_whitespace=True, min_length=1, max_length=5000)
    ] = Field(description="The question the reviewer answers.")
    nextAction: ExternalActionIn | None = Field(default=None, description="The call the approval lets through.")


class ExternalCompleteIn(_Strict):
    status: Literal["completed", "failed"] = Field(description="How the run ended.")
    result: dict[str, Any] | None = Field(
        default=None, description="`completed`: the result (`output` is shown in the chat and sent by webhook)."
    )
    error: Text | None = Field(default=None, description="`failed`: why, in a sentence (code `agent_failed`).")
