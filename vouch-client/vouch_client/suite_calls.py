"""The suite calls: what each sends and how its answer is read (the sync and async clients send them alike).

A suite's create always carries an Idempotency-Key, as a task's create does, so a resent create returns the first
answer instead of starting every run twice. Reads are resent as any GET is; cancel is not.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from email.message import Message
from typing import Any, Literal

import httpx

from vouch_client.calls import Call, _model, _segment, checked
from vouch_client.suite_models import CreatedSuite, Suite, SuitePage, SuiteRunPage, SuiteSpec

ExportFormat = Literal["jsonl", "csv", "inspect"]
# An export of a large suite is written while the request waits: more than a status read's 30 s.
EXPORT_TIMEOUT = 300.0


@dataclass(frozen=True)
class SuiteExport:
    """An export as the server sent it: its bytes, media type and the file name it suggests."""

    content: bytes
    media_type: str
    filename: str | None


def create_suite(suite: SuiteSpec | Mapping[str, Any], idempotency_key: str | None = None) -> Call[CreatedSuite]:
    spec = suite if isinstance(suite, SuiteSpec) else SuiteSpec.model_validate(dict(suite))
    # Generated once per call, so every retry of this create carries the same key.
    key = idempotency_key or f"vouch-py-{uuid.uuid4()}"
    return Call(
        "POST",
        "/api/eval/suites",
        _model(CreatedSuite),
        json=spec.body(),
        headers={"Idempotency-Key": key},
        idempotent=True,
    )


def suite(suite_id: str) -> Call[Suite]:
    return Call("GET", f"/api/eval/suites/{_segment(suite_id)}", _model(Suite), idempotent=True)


def suites(limit: int | None = None, cursor: str | None = None) -> Call[SuitePage]:
    params: list[tuple[str, str]] = []
    if limit is not None:
        params.append(("limit", str(limit)))
    if cursor:
        params.append(("cursor", cursor))
    return Call("GET", "/api/eval/suites", _model(SuitePage), params=params, idempotent=True)


def suite_runs(suite_id: str, limit: int | None = None, cursor: str | None = None) -> Call[SuiteRunPage]:
    params: list[tuple[str, str]] = []
    if limit is not None:
        params.append(("limit", str(limit)))
    if cursor:
        params.append(("cursor", cursor))
    path = f"/api/eval/suites/{_segment(suite_id)}/runs"
    return Call("GET", path, _model(SuiteRunPage), params=params, idempotent=True)


def cancel_suite(suite_id: str) -> Call[Suite]:
    return Call("POST", f"/api/eval/suites/{_segment(suite_id)}/cancel", _model(Suite))


def _filename(disposition: str | None) -> str | None:
    if not disposition:
        return None
    # The standard library's header parser reads quoted and RFC 2231 names alike.
    message = Message()
    message["Content-Disposition"] = disposition
    return message.get_filename()


def _export(response: httpx.Response) -> SuiteExport:
    checked(response)
    media_type = response.headers.get("Content-Type", "application/octet-stream").split(";")[0].strip()
    return SuiteExport(response.content, media_type, _filename(response.headers.get("Content-Disposition")))


def export_suite(suite_id: str, format: ExportFormat = "jsonl") -> Call[SuiteExport]:
    path = f"/api/eval/suites/{_segment(suite_id)}/export"
    return Call(
        "GET",
        path,
        _export,
        params=[("format", format)],
        # Not JSON: the client's default Accept would ask for what the export is not.
        headers={"Accept": "*/*"},
        idempotent=True,
        timeout=EXPORT_TIMEOUT,
    )
