"""A local OTLP/HTTP trace receiver: a real HTTP server on port 0 that accepts POST /v1/traces in protobuf and
decodes each request with the protocol's own message (opentelemetry-proto's ExportTraceServiceRequest)."""

from __future__ import annotations

import gzip
import zlib
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue
from opentelemetry.proto.trace.v1.trace_pb2 import Span


def value_of(value: AnyValue) -> Any:
    kind = value.WhichOneof("value")
    return getattr(value, kind) if kind is not None else None


@dataclass(frozen=True)
class ReceivedSpan:
    span: Span
    resource: dict[str, Any]
    scope: str

    @property
    def name(self) -> str:
        return self.span.name

    @property
    def attributes(self) -> dict[str, Any]:
        return {kv.key: value_of(kv.value) for kv in self.span.attributes}

    @property
    def span_id(self) -> str:
        return self.span.span_id.hex()

    @property
    def parent_id(self) -> str:
        return self.span.parent_span_id.hex()

    @property
    def trace_id(self) -> str:
        return self.span.trace_id.hex()


@dataclass
class OtlpReceiver:
    url: str = ""
    requests: list[ExportTraceServiceRequest] = field(default_factory=list)

    @property
    def traces_endpoint(self) -> str:
        return self.url + "/v1/traces"

    def spans(self) -> list[ReceivedSpan]:
        found = []
        for request in self.requests:
            for resource_spans in request.resource_spans:
                resource = {kv.key: value_of(kv.value) for kv in resource_spans.resource.attributes}
                for scope_spans in resource_spans.scope_spans:
                    found += [ReceivedSpan(s, resource, scope_spans.scope.name) for s in scope_spans.spans]
        return found

    def spans_of(self, execution_id: str) -> list[ReceivedSpan]:
        return [s for s in self.spans() if s.attributes.get("vouch.execution.id") == execution_id]


@asynccontextmanager
async def otlp_receiver() -> AsyncIterator[OtlpReceiver]:
    receiver = OtlpReceiver()

    async def traces(request: web.Request) -> web.Response:
        if request.content_type != "application/x-protobuf":
            return web.Response(status=415)
        body = await request.read()
        encoding = request.headers.get("Content-Encoding", "")
        if encoding == "gzip":
            body = gzip.decompress(body)
        elif encoding == "deflate":
            body = zlib.decompress(body)
        message = ExportTraceServiceRequest()
        message.ParseFromString(body)
        receiver.requests.append(message)
        return web.Response(
            body=ExportTraceServiceResponse().SerializeToString(), content_type="application/x-protobuf"
        )

    app = web.Application()
    app.router.add_post("/v1/traces", traces)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    receiver.url = f"http://127.0.0.1:{runner.addresses[0][1]}"
    try:
        yield receiver
    finally:
        await runner.cleanup()
