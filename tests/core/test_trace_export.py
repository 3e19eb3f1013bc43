"""OpenTelemetry export (issue 23.6): with an OTLP endpoint set, every execution's spans reach the collector, once.

A real OTLP/HTTP receiver on port 0 decodes what arrives with the protocol's own messages
(tests/support/otlp_receiver.py); the runs are real: the offline agent paused at a checkpoint approved through
the API, and the model agent against the local OpenAI-compatible server, which reports token usage.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import timedelta

import sqlalchemy as sa
from aiohttp import web
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

from api.app import create_app
from core.db import Database
from core.ids import new_id
from core.models import TraceExport, utcnow
from core.settings import Settings, load_settings
from core.trace_export import export_due
from core.trace_spans import SpanBuilder, service_resource, span_id_of, trace_id_of
from tests.api.helpers import account, create_ok, decide, has_status, paused_at, task, wait_for
from tests.api.rows import insert_execution
from tests.conftest import Account, Service, bearer, make_account
from tests.support.fake_llm import call, fake_llm
from tests.support.otlp_receiver import OtlpReceiver, ReceivedSpan, otlp_receiver
from tests.support.route_server import route_server
from tests.support.waiting import until

NOTE = 'Write a note called plan.md saying "ship it".'
CHECKPOINT = {"stage": "Draft note", "description": "The plan is written", "verificationQuestion": "Write it?"}
OWNER = "owner@example.com"


@asynccontextmanager
async def serving(settings: Settings) -> AsyncIterator[Service]:
    """The web app with its in-process worker, as `vouch serve` runs it; leaving it stops the process's worker."""
    app = create_app(settings, run_worker=True)
    async with app.test_app() as test_app:
        yield Service(app, test_app.test_client(), settings)


async def spans_arrive(receiver: OtlpReceiver, execution_id: str, count: int) -> list[ReceivedSpan]:
    async def check() -> list[ReceivedSpan] | None:
        spans = receiver.spans_of(execution_id)
        return spans if len(spans) >= count else None

    return await until(check)


async def outbox(service: Service) -> list[tuple[str, str, str]]:
    async with service.db.reading() as session:
        rows = await session.execute(sa.select(TraceExport.execution_id, TraceExport.unit, TraceExport.status))
        return sorted(tuple(row) for row in rows)


def by_name(spans: list[ReceivedSpan], name: str) -> list[ReceivedSpan]:
    return [s for s in spans if s.name == name]


async def paused_then_approved(service: Service, owner: Account) -> str:
    execution_id = await create_ok(
        service, owner.key, task(taskDescription=NOTE, checkpoints=[CHECKPOINT], assignedReviewer=OWNER)
    )
    record = await wait_for(service, owner.key, execution_id, paused_at(0))
    checkpoint_id = record["checkpoints"][0]["checkpointId"]
    code, body = await decide(service, owner.key, execution_id, checkpoint_id, {"decision": "approve"})
    assert code == 200, body
    await wait_for(service, owner.key, execution_id, has_status("completed"))
    return execution_id


async def test_an_approved_offline_run_exports_its_spans_once_across_a_restart(settings: Settings) -> None:
    async with otlp_receiver() as receiver:
        config = settings.with_changes(otel_traces_endpoint=receiver.traces_endpoint, worker_poll_seconds=0.5)
        async with serving(config) as service:
            owner = await account(service, OWNER, "eval:manage")
            execution_id = await paused_then_approved(service, owner)
            # The run's span, its tool call (write_file) and the review wait: three spans in all.
            spans = await spans_arrive(receiver, execution_id, 3)
            record = await wait_for(service, owner.key, execution_id, has_status("completed"))
            checkpoint_id = record["checkpoints"][0]["checkpointId"]
            sent = sorted([(execution_id, "run", "sent"), (execution_id, f"review:{checkpoint_id}:1", "sent")])

            # The collector has the spans before the exporter's next transaction marks them sent.
            async def all_sent() -> list[tuple[str, str, str]] | None:
                rows = await outbox(service)
                return rows if rows == sent else None

            await until(all_sent)

        [run] = by_name(spans, "invoke_agent offline")
        trace_id = f"{trace_id_of(execution_id):032x}"
        assert run.trace_id == trace_id and run.parent_id == ""
        assert run.span_id == f"{span_id_of(execution_id, 'run'):016x}"
        assert run.resource["service.name"] == "vouch"
        assert run.scope == "vouch"
        attributes = run.attributes
        assert attributes["gen_ai.operation.name"] == "invoke_agent"
        assert attributes["gen_ai.agent.name"] == "offline"
        assert attributes["gen_ai.conversation.id"] == execution_id
        assert attributes["vouch.execution.status"] == "completed"
        assert attributes["vouch.task.name"] == "Weekly digest"
        assert (attributes["gen_ai.usage.input_tokens"], attributes["gen_ai.usage.output_tokens"]) == (0, 0)

        [tool] = by_name(spans, "execute_tool write_file")
        assert (tool.trace_id, tool.parent_id) == (trace_id, run.span_id)
        assert tool.attributes["gen_ai.operation.name"] == "execute_tool"
        assert tool.attributes["gen_ai.tool.name"] == "write_file"
        assert tool.attributes["gen_ai.tool.call.id"].startswith("call")

        [review] = by_name(spans, "vouch.review")
        assert (review.trace_id, review.parent_id) == (trace_id, run.span_id)
        assert review.attributes["vouch.decision"] == "approve"
        assert review.attributes["vouch.reviewer.channel"] == "api"
        assert review.attributes["vouch.checkpoint.id"] == checkpoint_id
        assert review.attributes["vouch.checkpoint.stage"] == "Draft note"
        # The wait began before the tool ran and ended before it did: the write waited for the approval.
        assert run.span.start_time_unix_nano <= review.span.start_time_unix_nano
        assert review.span.end_time_unix_nano <= tool.span.end_time_unix_nano <= run.span.end_time_unix_nano
        assert len(spans) == 3

        # Another process starts on the same database: nothing of the first run is exported again. The next
        # run's spans arrive after anything still pending would have been sent (the exporter's first round).
        async with serving(config) as service:
            owner_again = await account(service, "other@example.com", "eval:manage")
            second = await create_ok(service, owner_again.key, task())
            await wait_for(service, owner_again.key, second, has_status("completed"))
            await spans_arrive(receiver, second, 2)
            await until(lambda: _all_sent(service))
        counts = Counter(s.span_id for s in receiver.spans_of(execution_id))
        assert sorted(counts.values()) == [1, 1, 1]


async def _all_sent(service: Service) -> bool | None:
    return True if all(status == "sent" for _, _, status in await outbox(service)) else None


async def test_a_model_run_exports_chat_spans_with_their_token_usage(settings: Settings) -> None:
    async with otlp_receiver() as receiver, fake_llm(
        call("write_file", path="plan.md", content="ship it"), call("finish", summary="Wrote the plan.")
    ) as llm:
        config = settings.with_changes(
            otel_traces_endpoint=receiver.traces_endpoint, agent_base_url=llm.base_url, worker_poll_seconds=0.5
        )
        async with serving(config) as service:
            owner = await account(service, OWNER, "eval:manage")
            body = task(taskDescription=NOTE, agentModel="openai:scripted", testMode="without-verification")
            execution_id = await create_ok(service, owner.key, body)
            await wait_for(service, owner.key, execution_id, has_status("completed"))
            spans = await spans_arrive(receiver, execution_id, 4)

    [run] = by_name(spans, "invoke_agent openai:scripted")
    assert run.attributes["gen_ai.provider.name"] == "openai"
    assert run.attributes["gen_ai.request.model"] == "scripted"
    chats = by_name(spans, "chat scripted")
    assert len(chats) == 2 == len(llm.requests)
    for chat in chats:
        assert chat.parent_id == run.span_id and chat.trace_id == run.trace_id
        assert chat.span.kind == chat.span.SPAN_KIND_CLIENT
        attributes = chat.attributes
        assert attributes["gen_ai.operation.name"] == "chat"
        assert attributes["gen_ai.provider.name"] == "openai"
        assert attributes["gen_ai.request.model"] == attributes["gen_ai.response.model"] == "scripted"
        # What the fake server reported as usage (tests/support/fake_llm.py: 100 in, 20 out per answer).
        assert (attributes["gen_ai.usage.input_tokens"], attributes["gen_ai.usage.output_tokens"]) == (100, 20)
    assert (run.attributes["gen_ai.usage.input_tokens"], run.attributes["gen_ai.usage.output_tokens"]) == (200, 40)
    [tool] = by_name(spans, "execute_tool write_file")
    assert tool.parent_id == run.span_id
    # The model's turn came before the tool it asked for.
    first_chat = min(chats, key=lambda c: c.span.start_time_unix_nano)
    assert first_chat.span.end_time_unix_nano <= tool.span.start_time_unix_nano
    assert len(spans) == 4


async def test_without_an_endpoint_nothing_is_queued_or_exported(settings: Settings) -> None:
    async with otlp_receiver() as receiver:
        assert settings.otel_traces_endpoint is None
        async with serving(settings) as service:
            owner = await account(service, OWNER, "eval:manage")
            execution_id = await paused_then_approved(service, owner)
            assert await outbox(service) == []
            assert execution_id
        assert receiver.requests == []


def test_the_endpoint_comes_from_the_standard_variables(tmp_path: object) -> None:
    base = {"VOUCH_DATA_DIR": str(tmp_path), "VOUCH_SECRET_KEY": "k" * 32}
    assert load_settings(base).otel_traces_endpoint is None
    assert load_settings({**base, "OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"}).otel_traces_endpoint == (
        "http://c:4318/v1/traces"
    )
    traces = {**base, "OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318/", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://t/x"}
    assert load_settings(traces).otel_traces_endpoint == "http://t/x"
    assert load_settings({**base, "OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318/"}).otel_traces_endpoint == (
        "http://c:4318/v1/traces"
    )
    off = {**base, "OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318", "OTEL_SDK_DISABLED": "true"}
    assert load_settings(off).otel_traces_endpoint is None
    none = {**base, "OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318", "OTEL_TRACES_EXPORTER": "none"}
    assert load_settings(none).otel_traces_endpoint is None


async def test_an_external_agent_s_run_exports_what_it_reported(settings: Settings) -> None:
    events = [
        {"key": "t1", "type": "tool_call", "tool": "read_notes", "args": {}, "result": {"lines": 12}, "durationMs": 35},
        {"key": "u1", "type": "usage", "model": "openai:gpt-4o", "inputTokens": 1000, "outputTokens": 100},
    ]
    async with otlp_receiver() as receiver:
        config = settings.with_changes(otel_traces_endpoint=receiver.traces_endpoint, worker_poll_seconds=0.5)
        async with serving(config) as service:
            owner = await account(service, OWNER, "eval:manage")
            execution_id = await create_ok(service, owner.key, task(agentModel="external"))
            actions = f"/api/eval/executions/{execution_id}"
            sent = await service.client.post(f"{actions}/events", json={"events": events}, headers=bearer(owner.key))
            assert sent.status_code == 200, await sent.get_json()
            done = await service.client.post(
                f"{actions}/complete", json={"status": "completed", "result": {"output": "ok"}},
                headers=bearer(owner.key),
            )
            assert done.status_code == 200, await done.get_json()
            spans = await spans_arrive(receiver, execution_id, 3)

    [run] = by_name(spans, "invoke_agent external")
    assert run.attributes["vouch.execution.status"] == "completed"
    assert (run.attributes["gen_ai.usage.input_tokens"], run.attributes["gen_ai.usage.output_tokens"]) == (1000, 100)
    [chat] = by_name(spans, "chat gpt-4o")
    assert chat.parent_id == run.span_id
    assert (chat.attributes["gen_ai.provider.name"], chat.attributes["gen_ai.request.model"]) == ("openai", "gpt-4o")
    assert (chat.attributes["gen_ai.usage.input_tokens"], chat.attributes["gen_ai.usage.output_tokens"]) == (1000, 100)
    [tool] = by_name(spans, "execute_tool read_notes")
    assert tool.parent_id == run.span_id
    assert tool.span.end_time_unix_nano - tool.span.start_time_unix_nano == 35_000_000
    assert len(spans) == 3


async def test_a_claim_whose_lease_lapsed_does_not_record_over_its_successor(db: Database, settings: Settings) -> None:
    """Worker A's collector hangs: while A's lease holds, B finds nothing to export; once it has run out, B claims
    the unit and sends it, and A's late refusal then changes nothing (else the unit would go back to pending and
    reach the collector twice)."""
    owner = await make_account(db, settings, OWNER)
    execution_id, _ = await insert_execution(db, owner, status="completed")
    async with db.transaction() as session:
        session.add(TraceExport(id=new_id("trc"), execution_id=execution_id, unit="run", status="pending",
                                attempts=0, next_attempt_at=utcnow(), created_at=utcnow()))  # fmt: skip
    arrived, release = asyncio.Event(), asyncio.Event()

    async def hanging(request: web.Request) -> web.Response:
        arrived.set()
        await release.wait()
        return web.Response(status=400)  # not retried by the exporter: A's export fails at once

    builder = SpanBuilder(service_resource(), None)
    async with route_server("/v1/traces", hanging) as hanging_url, otlp_receiver() as receiver:
        try:
            a = asyncio.create_task(export_due(db, settings, builder, OTLPSpanExporter(endpoint=hanging_url)))
            await asyncio.wait_for(arrived.wait(), 20)
            fast = OTLPSpanExporter(endpoint=receiver.traces_endpoint)
            assert await export_due(db, settings, builder, fast) == 0  # A's lease holds: nothing for B
            async with db.transaction() as session:  # A's lease runs out meanwhile
                await session.execute(sa.update(TraceExport).values(locked_until=utcnow() - timedelta(seconds=1)))
            assert await export_due(db, settings, builder, fast) == 1
            release.set()
            assert await a == 1
            assert len(receiver.spans_of(execution_id)) > 0
        finally:
            release.set()  # a failed assertion above must not leave A's request hanging
    async with db.reading() as session:
        row = await session.scalar(sa.select(TraceExport))
    assert row is not None and (row.status, row.attempts, row.last_error) == ("sent", 2, None)
