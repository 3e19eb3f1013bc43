"""The spans of an execution, built from its stored events with the OpenTelemetry SDK, after the fact.

Spans follow the OpenTelemetry GenAI semantic conventions: the run is an `invoke_agent` span, each model request
a `chat` span with its token usage, each tool call an `execute_tool` span. A review wait is Vouch's own
`vouch.review` span, with the decision. All are children of the run's span.

Nothing here holds a span open while the run goes on: the run spans pauses and processes, so its spans are
made from the events' timestamps once a unit is complete (core/trace_outbox.py), through the SDK's tracer with
explicit start and end times. Ids are derived from the execution's id, so every process, and a repeated export,
names the same trace and the same spans.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.sdk.resources import SERVICE_NAME, Resource
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.id_generator import IdGenerator
from opentelemetry.sdk.trace.sampling import ALWAYS_ON
from opentelemetry.trace import NonRecordingSpan, SpanContext, SpanKind, Status, StatusCode, TraceFlags
from opentelemetry.util.types import AttributeValue

from core.model_profiles import PROVIDERS
from core.models import Event
from core.vocabulary import ENDING_EVENTS, EventType, ExecutionStatus

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
DEFAULT_SERVICE_NAME = "vouch"
REVIEW_SPAN = "vouch.review"


@dataclass(frozen=True)
class RunFacts:
    """What the spans say about the execution besides its events."""

    execution_id: str
    task_name: str
    agent_model: str
    test_mode: str
    status: str
    created_at: datetime
    error_code: str | None
    error_detail: str | None
    # The provider and the model name it is asked for (gen_ai.provider.name, gen_ai.request.model); None for the
    # offline agent and an external one, whose model Vouch does not know.
    provider: str | None
    request_model: str | None


def trace_id_of(execution_id: str) -> int:
    return _digest(f"trace:{execution_id}", 16)


def span_id_of(execution_id: str, part: str) -> int:
    return _digest(f"span:{execution_id}:{part}", 8)


def _digest(text: str, size: int) -> int:
    value = int.from_bytes(hashlib.sha256(text.encode()).digest()[:size], "big")
    return value or 1  # an all-zero id is invalid


def _ns(moment: datetime) -> int:
    return (moment - _EPOCH) // timedelta(microseconds=1) * 1000


def service_resource() -> Resource:
    """The SDK's resource (OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES), named `vouch` unless they name it."""
    detected = Resource.create({})
    if str(detected.attributes.get(SERVICE_NAME, "")).startswith("unknown_service"):
        detected = detected.merge(Resource({SERVICE_NAME: DEFAULT_SERVICE_NAME}))
    return detected


class _PlannedIds(IdGenerator):
    """Hands out the ids the builder planned for the next span: derived, not random (see the module's doc)."""

    def __init__(self) -> None:
        self.trace_id = 0
        self.span_id = 0

    def generate_trace_id(self) -> int:
        return self.trace_id

    def generate_span_id(self) -> int:
        return self.span_id

    def is_trace_id_random(self) -> bool:
        return True  # SHA-256 bits: as uniform as random ones


class _Collected(SpanProcessor):
    def __init__(self) -> None:
        self.spans: list[ReadableSpan] = []

    def on_end(self, span: ReadableSpan) -> None:
        self.spans.append(span)


class SpanBuilder:
    """Builds one unit's spans at a time (not thread-safe: one builder per exporter)."""

    def __init__(self, resource: Resource, version: str | None = None) -> None:
        self._ids = _PlannedIds()
        self._collected = _Collected()
        # Every execution is exported (no sampler from the environment): the units of one trace are exported
        # at different times and must not be sampled apart.
        provider = TracerProvider(
            sampler=ALWAYS_ON, resource=resource, shutdown_on_exit=False, id_generator=self._ids
        )
        provider.add_span_processor(self._collected)
        self._tracer = provider.get_tracer("vouch", version)

    def _span(
        self,
        facts: RunFacts,
        part: str,
        name: str,
        start: datetime,
        end: datetime,
        attributes: dict[str, AttributeValue],
        *,
        parent: Context | None,
        kind: SpanKind = SpanKind.INTERNAL,
        error: tuple[str, str] | None = None,
    ) -> trace.Span:
        self._ids.trace_id = trace_id_of(facts.execution_id)
        self._ids.span_id = span_id_of(facts.execution_id, part)
        span = self._tracer.start_span(
            name, context=parent or Context(), kind=kind, attributes=attributes, start_time=_ns(start)
        )
        if error is not None:
            span.set_attribute("error.type", error[0])
            span.set_status(Status(StatusCode.ERROR, error[1]))
        if part != "run":
            span.end(end_time=_ns(max(start, end)))
        return span

    def _take(self) -> list[ReadableSpan]:
        spans, self._collected.spans = self._collected.spans, []
        return spans

    def run_spans(self, facts: RunFacts, events: Sequence[Event]) -> list[ReadableSpan]:
        """The run's span with its model requests, tool calls and the review waits no decision ended."""
        ending = next((e for e in reversed(events) if e.type in ENDING_EVENTS), None)
        started = next((e for e in events if e.type == EventType.EXECUTION_STARTED), None)
        start = started.created_at if started is not None else facts.created_at
        end = ending.created_at if ending is not None else (events[-1].created_at if events else start)
        agent = facts.agent_model
        attributes = {**_common(facts), "gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": agent,
                      "gen_ai.agent.id": facts.execution_id, "vouch.execution.status": facts.status,
                      "vouch.task.name": facts.task_name, "vouch.test_mode": facts.test_mode}
        tokens = [0, 0]
        for event in events:
            if event.type == EventType.MODEL_REQUEST:
                tokens[0] += int(event.payload.get("inputTokens") or 0)
                tokens[1] += int(event.payload.get("outputTokens") or 0)
        attributes["gen_ai.usage.input_tokens"], attributes["gen_ai.usage.output_tokens"] = tokens
        failed = facts.status == ExecutionStatus.FAILED
        error = (facts.error_code or "_OTHER", facts.error_detail or "failed") if failed else None
        root = self._span(facts, "run", f"invoke_agent {agent}", start, end, attributes, parent=None, error=error)
        inside = trace.set_span_in_context(root)
        for event in events:
            if event.type == EventType.MODEL_REQUEST:
                self._chat(facts, event, inside)
            elif event.type == EventType.TOOL_RESULT:
                self._tool(facts, event, inside)
        decided = {_wait_key(e.payload) for e in events if e.type == EventType.CHECKPOINT_DECIDED}
        for event in events:
            if event.type == EventType.CHECKPOINT_AWAITING_REVIEW and _wait_key(event.payload) not in decided:
                self._review(facts, event, None, end, inside)
        root.end(end_time=_ns(max(start, end)))
        return self._take()

    def review_spans(self, facts: RunFacts, events: Sequence[Event], checkpoint_id: str,
                     attempt: int) -> list[ReadableSpan]:
        """One decided review wait, as a child of the run's span (exported later, when the run ends)."""
        key = (checkpoint_id, attempt)
        decided = next((e for e in events if e.type == EventType.CHECKPOINT_DECIDED
                        and _wait_key(e.payload) == key), None)
        if decided is None:
            return []
        awaiting = next((e for e in events if e.type == EventType.CHECKPOINT_AWAITING_REVIEW
                         and _wait_key(e.payload) == key), None)
        run = SpanContext(
            trace_id_of(facts.execution_id),
            span_id_of(facts.execution_id, "run"),
            is_remote=False,
            trace_flags=TraceFlags(TraceFlags.SAMPLED),
        )
        parent = trace.set_span_in_context(NonRecordingSpan(run))
        self._review(facts, awaiting, decided, decided.created_at, parent)
        return self._take()

    def _chat(self, facts: RunFacts, event: Event, parent: Context) -> None:
        payload = event.payload
        reported = str(payload.get("model") or "")
        model, provider = facts.request_model or reported, facts.provider
        if facts.request_model is None:
            # An external agent reports `provider:model` as a task would name it: split where the provider is known.
            named, _, rest = reported.partition(":")
            if named in PROVIDERS and rest:
                provider, model = named, rest
        attributes: dict[str, AttributeValue] = {
            **_common(facts),
            "gen_ai.operation.name": "chat",
            "gen_ai.request.model": model,
            "gen_ai.usage.input_tokens": int(payload.get("inputTokens") or 0),
            "gen_ai.usage.output_tokens": int(payload.get("outputTokens") or 0),
        }
        if provider is not None:
            attributes["gen_ai.provider.name"] = provider
        if reported and facts.request_model is not None:
            attributes["gen_ai.response.model"] = reported  # the model that answered, as the provider named it
        if payload.get("costUsd") is not None:
            attributes["vouch.cost_usd"] = float(payload["costUsd"])
        end = event.created_at
        start = end - timedelta(milliseconds=float(payload.get("durationMs") or 0))
        self._span(facts, f"seq:{event.seq}", f"chat {model}".strip(), start, end, attributes, parent=parent,
                   kind=SpanKind.CLIENT)

    def _tool(self, facts: RunFacts, event: Event, parent: Context) -> None:
        payload = event.payload
        tool = str(payload.get("tool") or "")
        attributes: dict[str, AttributeValue] = {
            **_common(facts),
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": tool,
            "gen_ai.tool.call.id": str(payload.get("toolCallId") or ""),
            "gen_ai.tool.type": "function",
        }
        end = event.created_at
        start = end - timedelta(milliseconds=float(payload.get("durationMs") or 0))
        error = ("tool_error", str(payload["error"])[:500]) if payload.get("error") else None
        self._span(facts, f"seq:{event.seq}", f"execute_tool {tool}", start, end, attributes, parent=parent,
                   error=error)

    def _review(self, facts: RunFacts, awaiting: Event | None, decided: Event | None, end: datetime,
                parent: Context) -> None:
        source = decided if decided is not None else awaiting
        assert source is not None
        checkpoint_id, attempt = _wait_key(source.payload)
        attributes: dict[str, AttributeValue] = {
            **_common(facts),
            "vouch.checkpoint.id": checkpoint_id,
            "vouch.review.attempt": attempt,
        }
        if awaiting is not None:
            attributes["vouch.checkpoint.stage"] = str(awaiting.payload.get("stage") or "")
            attributes["vouch.checkpoint.position"] = int(awaiting.payload.get("position") or 0)
        if decided is not None:
            attributes["vouch.decision"] = str(decided.payload.get("decision") or "")
            attributes["vouch.reviewer.channel"] = str(decided.payload.get("via") or "")
            attributes["vouch.decision.edited"] = decided.payload.get("editedArgs") is not None
        else:
            attributes["vouch.decision"] = "none"  # the run ended (cancelled, failed) while this wait was open
        start = awaiting.created_at if awaiting is not None else end
        self._span(facts, f"review:{checkpoint_id}:{attempt}", REVIEW_SPAN, start, end, attributes, parent=parent)


def _common(facts: RunFacts) -> dict[str, AttributeValue]:
    common: dict[str, AttributeValue] = {
        "gen_ai.conversation.id": facts.execution_id,
        "vouch.execution.id": facts.execution_id,
    }
    if facts.provider is not None:
        common["gen_ai.provider.name"] = facts.provider
    if facts.request_model is not None:
        common["gen_ai.request.model"] = facts.request_model
    return common


def _wait_key(payload: dict[str, Any]) -> tuple[str, int]:
    return str(payload.get("checkpointId")), int(payload.get("attempt") or 1)
