"""Bring your own agent: drive an execution created with `agentModel: "external"` from your own code.

    with Client(url, key) as vouch:
        run = vouch.start_external({"taskName": "Release mail", "taskDescription": "…",
                                    "assignedReviewer": "lee@example.com"})
        run.message("Drafting the mail")
        decision = run.checkpoint("Send", "Send this mail?", action={"tool": "send_mail", "args": {"to": "…"}})
        if decision.approved:
            send_mail(**decision.args)          # the reviewer's edits applied
        run.complete({"output": "sent"})

Keys make every step safe to repeat: a restarted agent that replays its steps in the same order asks the
same checkpoints under the same keys, and gets the decisions already made instead of asking twice.
"""

from __future__ import annotations

import functools
import inspect
import time
import uuid
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, ParamSpec, Protocol, TypeVar

from vouch_client import external_calls
from vouch_client.calls import Call
from vouch_client.errors import VouchError
from vouch_client.external_calls import CheckpointDecision, Completed, EventsAnswer

P = ParamSpec("P")
R = TypeVar("R")
T = TypeVar("T")


# The clients as the runs use them: structural, so that this module needs neither (they import it).
class Client(Protocol):
    def _send(self, call: Call[T]) -> T: ...


class AsyncClient(Protocol):
    async def _send(self, call: Call[T]) -> T: ...

POLL_SECONDS = 25.0


class Rejected(VouchError):
    """The reviewer rejected the checkpoint; `comment` says why."""

    def __init__(self, decision: CheckpointDecision) -> None:
        super().__init__(f"rejected by {decision.by} via {decision.via}: {decision.comment}")
        self.decision = decision
        self.comment = decision.comment or ""


class _Steps:
    """What both runs share: the events' shapes and the checkpoints' keys."""

    def __init__(self, execution_id: str) -> None:
        self.execution_id = execution_id
        self._asked: dict[str, int] = {}

    def checkpoint_key(self, stage: str, key: str | None) -> str:
        # Deterministic: the n-th checkpoint of a stage in this run, so a replay after a restart asks the same one.
        if key is not None:
            return key
        self._asked[stage] = self._asked.get(stage, 0) + 1
        return f"{stage}#{self._asked[stage]}"

    @staticmethod
    def message_event(text: str, key: str | None) -> dict[str, Any]:
        return {"key": key or f"m-{uuid.uuid4()}", "type": "message", "text": text}

    @staticmethod
    def tool_event(
        name: str, args: Mapping[str, Any], result: Any, error: str | None, duration_ms: float, key: str | None
    ) -> dict[str, Any]:
        event = {"key": key or f"t-{uuid.uuid4()}", "type": "tool_call", "tool": name, "args": dict(args),
                 "result": result, "durationMs": duration_ms}
        if error is not None:
            event["error"] = error
        return event

    @staticmethod
    def usage_event(model: str, input_tokens: int, output_tokens: int, key: str | None) -> dict[str, Any]:
        return {"key": key or f"u-{uuid.uuid4()}", "type": "usage", "model": model, "inputTokens": input_tokens,
                "outputTokens": output_tokens}


def _checked(decision: CheckpointDecision) -> CheckpointDecision:
    if decision.decision in ("reject", "cancel"):
        raise Rejected(decision)
    return decision


class ExternalRun(_Steps):
    """One external execution, driven through a sync `Client` (`Client.start_external` or `Client.attach`)."""

    def __init__(self, client: Client, execution_id: str) -> None:
        super().__init__(execution_id)
        self._client = client

    def events(self, *events: Mapping[str, Any]) -> EventsAnswer:
        return self._client._send(external_calls.send_events(self.execution_id, events))

    def message(self, text: str, *, key: str | None = None) -> EventsAnswer:
        return self.events(self.message_event(text, key))

    def tool_call(
        self, name: str, args: Mapping[str, Any], *, result: Any = None, error: str | None = None,
        duration_ms: float = 0.0, key: str | None = None,
    ) -> EventsAnswer:
        return self.events(self.tool_event(name, args, result, error, duration_ms, key))

    def usage(self, model: str, input_tokens: int, output_tokens: int, *, key: str | None = None) -> EventsAnswer:
        return self.events(self.usage_event(model, input_tokens, output_tokens, key))

    def ask(
        self, stage: str, question: str, *, action: Mapping[str, Any] | None = None, key: str | None = None,
        description: str = "",
    ) -> CheckpointDecision:
        """Pause for the reviewer without waiting (see `checkpoint`)."""
        call = external_calls.ask_checkpoint(
            self.execution_id, self.checkpoint_key(stage, key), stage, question, action, description
        )
        return self._client._send(call)

    def wait_decision(self, checkpoint_id: str, timeout: float | None = None) -> CheckpointDecision:
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            left = POLL_SECONDS if deadline is None else min(POLL_SECONDS, max(0.0, deadline - time.monotonic()))
            answer = self._client._send(external_calls.checkpoint_decision(self.execution_id, checkpoint_id, left))
            if answer.decision is not None or (deadline is not None and time.monotonic() >= deadline):
                return answer

    def checkpoint(
        self, stage: str, question: str, *, action: Mapping[str, Any] | None = None, key: str | None = None,
        description: str = "", timeout: float | None = None,
    ) -> CheckpointDecision:
        """Pause for the reviewer and block until they decide (any channel). The same `key` after a restart
        answers with the same checkpoint and, once made, its decision."""
        asked = self.ask(stage, question, action=action, key=key, description=description)
        if asked.decision is not None:
            return asked
        return self.wait_decision(asked.checkpointId, timeout)

    def gated(
        self, *, stage: str, question: str, key: str | None = None
    ) -> Callable[[Callable[P, R]], Callable[P, R]]:
        """Pause before each call of the decorated function; on approve call it with the reviewer's edited
        keyword arguments, on reject raise `Rejected`."""

        def decorate(function: Callable[P, R]) -> Callable[P, R]:
            @functools.wraps(function)
            def gate(*args: P.args, **kwargs: P.kwargs) -> R:
                bound = _arguments(function, args, kwargs)
                action = {"tool": function.__name__, "args": bound}
                decision = _checked(self.checkpoint(stage, question, action=action, key=key))
                return function(**decision.args)  # type: ignore[call-arg]

            return gate

        return decorate

    def complete(self, result: Mapping[str, Any] | None = None) -> Completed:
        return self._client._send(external_calls.complete(self.execution_id, "completed", result=result or {}))

    def fail(self, error: str) -> Completed:
        return self._client._send(external_calls.complete(self.execution_id, "failed", error=error))


class AsyncExternalRun(_Steps):
    """One external execution, driven through an `AsyncClient`; the same methods as `ExternalRun`, awaited."""

    def __init__(self, client: AsyncClient, execution_id: str) -> None:
        super().__init__(execution_id)
        self._client = client

    async def events(self, *events: Mapping[str, Any]) -> EventsAnswer:
        return await self._client._send(external_calls.send_events(self.execution_id, events))

    async def message(self, text: str, *, key: str | None = None) -> EventsAnswer:
        return await self.events(self.message_event(text, key))

    async def tool_call(
        self, name: str, args: Mapping[str, Any], *, result: Any = None, error: str | None = None,
        duration_ms: float = 0.0, key: str | None = None,
    ) -> EventsAnswer:
        return await self.events(self.tool_event(name, args, result, error, duration_ms, key))

    async def usage(
        self, model: str, input_tokens: int, output_tokens: int, *, key: str | None = None
    ) -> EventsAnswer:
        return await self.events(self.usage_event(model, input_tokens, output_tokens, key))

    async def ask(
        self, stage: str, question: str, *, action: Mapping[str, Any] | None = None, key: str | None = None,
        description: str = "",
    ) -> CheckpointDecision:
        call = external_calls.ask_checkpoint(
            self.execution_id, self.checkpoint_key(stage, key), stage, question, action, description
        )
        return await self._client._send(call)

    async def wait_decision(self, checkpoint_id: str, timeout: float | None = None) -> CheckpointDecision:
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            left = POLL_SECONDS if deadline is None else min(POLL_SECONDS, max(0.0, deadline - time.monotonic()))
            call = external_calls.checkpoint_decision(self.execution_id, checkpoint_id, left)
            answer = await self._client._send(call)
            if answer.decision is not None or (deadline is not None and time.monotonic() >= deadline):
                return answer

    async def checkpoint(
        self, stage: str, question: str, *, action: Mapping[str, Any] | None = None, key: str | None = None,
        description: str = "", timeout: float | None = None,
    ) -> CheckpointDecision:
        asked = await self.ask(stage, question, action=action, key=key, description=description)
        if asked.decision is not None:
            return asked
        return await self.wait_decision(asked.checkpointId, timeout)

    def gated(
        self, *, stage: str, question: str, key: str | None = None
    ) -> Callable[[Callable[P, Awaitable[R]]], Callable[P, Awaitable[R]]]:
        """As `ExternalRun.gated`, for a coroutine function."""

        def decorate(function: Callable[P, Awaitable[R]]) -> Callable[P, Awaitable[R]]:
            @functools.wraps(function)
            async def gate(*args: P.args, **kwargs: P.kwargs) -> R:
                bound = _arguments(function, args, kwargs)
                action = {"tool": function.__name__, "args": bound}
                decision = _checked(await self.checkpoint(stage, question, action=action, key=key))
                return await function(**decision.args)  # type: ignore[call-arg]

            return gate

        return decorate

    async def complete(self, result: Mapping[str, Any] | None = None) -> Completed:
        call = external_calls.complete(self.execution_id, "completed", result=result or {})
        return await self._client._send(call)

    async def fail(self, error: str) -> Completed:
        return await self._client._send(external_calls.complete(self.execution_id, "failed", error=error))


def _arguments(function: Callable[..., Any], args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> dict[str, Any]:
    """The call's arguments by name, defaults included: what the reviewer sees and may edit."""
    bound = inspect.signature(function).bind(*args, **kwargs)
    bound.apply_defaults()
    return dict(bound.arguments)
