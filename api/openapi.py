"""The OpenAPI 3.1 document of the REST API, served at /api/openapi.json and shown at /api/docs (api/apidocs.py).

Component schemas come from api/openapi_schemas.py (the request models the views validate with, and the
response models), operations from api/openapi_operations.py. The document is built once per app, on first
use, and kept in `app.extensions`: it only changes when the code (or the limits in the settings) do.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any

from quart import current_app

from api.openapi_answers import PROBLEM_CODES, Operation
from api.openapi_operations import OPERATIONS
from api.openapi_schemas import component_schemas
from api.problems import ApiError
from core.apikeys import KEY_LENGTH, PREFIX
from core.settings import Settings
from core.web.services import services

OPENAPI_PATH = "/api/openapi.json"
DOCS_PATH = "/api/docs"

_PARAMETERS: dict[str, dict[str, Any]] = {
    "ExecutionId": {
        "name": "executionId",
        "in": "path",
        "required": True,
        "description": "The execution's id, as returned by the create call.",
        "schema": {"type": "string", "example": "exe_01jcz3m7k2f4w8n6q0r5t9v3xa"},
    },
    "SuiteId": {
        "name": "suiteId",
        "in": "path",
        "required": True,
        "description": "The suite's id, as returned by the suite's create call.",
        "schema": {"type": "string", "example": "ste_01jcz3m7k2f4w8n6q0r5t9v3xa"},
    },
    "ExportFormat": {
        "name": "format",
        "in": "query",
        "description": "`jsonl`: one JSON object per run, a line each. `csv`: one row per run, a column per scorer. "
        "`inspect`: an Inspect AI eval log (`.eval`, a zip archive), one sample per run, which "
        "`inspect_ai.log.read_eval_log` reads and `inspect view` shows.",
        "schema": {"type": "string", "enum": ["jsonl", "csv", "inspect"], "default": "jsonl"},
    },
    "CheckpointId": {
        "name": "checkpointId",
        "in": "path",
        "required": True,
        "description": "The checkpoint's id, from the status record's `checkpoints[].checkpointId`.",
        "schema": {"type": "string", "example": "chk_01jcz3m7k2f4w8n6q0r5t9v3xb"},
    },
    "Wait": {
        "name": "wait",
        "in": "query",
        "description": "Seconds to hold the answer while no decision is made (a long-poll); it answers as soon "
        "as one is, on any channel.",
        "schema": {"type": "number", "minimum": 0, "maximum": 60, "default": 0},
    },
    "StatusFilter": {
        "name": "status",
        "in": "query",
        "description": "Only executions in these statuses; repeat it (`status=a&status=b`) or comma-separate "
        "(`status=a,b`).",
        "style": "form",
        "explode": True,
        "schema": {"type": "array", "items": {"$ref": "#/components/schemas/ExecutionStatus"}},
    },
    "Limit": {
        "name": "limit",
        "in": "query",
        "description": "Page size.",
        "schema": {"type": "integer", "minimum": 1, "maximum": 100, "default": 20},
    },
    "RunLimit": {
        "name": "limit",
        "in": "query",
        "description": "Page size.",
        "schema": {"type": "integer", "minimum": 1, "maximum": 500, "default": 100},
    },
    "Cursor": {
        "name": "cursor",
        "in": "query",
        "description": "`nextCursor` of the previous page (opaque, signed).",
        "schema": {"type": "string", "pattern": "^[A-Za-z0-9_-]*$"},
    },
    "IdempotencyKey": {
        "name": "Idempotency-Key",
        "in": "header",
        "description": 'Makes a retry safe: 1 to 255 printable ASCII characters, optionally quoted (`"abc"` is '
        "`abc`). Keys belong to the user and are remembered for 24 hours.",
        "schema": {"type": "string", "pattern": r"^[\x21-\x7e]([\x20-\x7e]{0,253}[\x21-\x7e])?$"},
    },
    "RequestId": {
        "name": "X-Request-Id",
        "in": "header",
        "description": "Your id for this request, echoed in `X-Request-Id` and in the service's logs. It is kept "
        "when it is 1 to 128 of `A-Z a-z 0-9 . _ -`; any other value is replaced by a fresh id, never refused.",
        "schema": {"type": "string"},
    },
}


_RATE_HEADERS = ("RateLimit-Policy", "RateLimit", "X-RateLimit-Limit", "X-RateLimit-Remaining", "X-RateLimit-Reset")
# Statuses only ever answered after the key was accepted and charged, so the rate-limit headers are certain.
# A 400, 404, 413 or 500 may come before that (a path no route matches, an oversized body) and may lack them.
_CHARGED_STATUSES = frozenset({403, 409, 415, 422, 429})
_OPTIONAL = ".optional"  # suffix of a header's variant that some answers lack


def _header_docs(settings: Settings) -> dict[str, dict[str, Any]]:
    count = {"type": "integer", "minimum": 0}
    quota = f"{settings.rate_limit} requests per {settings.rate_limit_window_seconds} seconds per key"
    docs: dict[str, tuple[str, dict[str, Any]]] = {
        "X-Request-Id": ("The request's id: yours if it was sane, else a fresh one.", {"type": "string"}),
        "RateLimit-Policy": (f"The quota (IETF draft ratelimit-headers): {quota}.", {"type": "string"}),
        "RateLimit": (
            "`r`: requests left; `t`: seconds until the whole quota is back (on a 429: the Retry-After).",
            {"type": "string"},
        ),
        "X-RateLimit-Limit": ("The quota per window.", count),
        "X-RateLimit-Remaining": ("Requests left now.", count),
        "X-RateLimit-Reset": ("Seconds (not an epoch time) until the whole quota is back, rounded up.", count),
        "Retry-After": ("Whole seconds to wait before trying again.", {"type": "integer", "minimum": 1}),
        "WWW-Authenticate": ("A `Bearer` challenge (RFC 6750).", {"type": "string"}),
        "Location": ("URL of the new execution's status record.", {"type": "string", "format": "uri"}),
        "Content-Disposition": (
            "`attachment` with the file's name: the suite's id and the format's extension (`.jsonl`, `.csv`, "
            "`.eval`).",
            {"type": "string"},
        ),
        "Idempotent-Replayed": (
            "`true` when this is the stored answer to an earlier request with the same `Idempotency-Key`.",
            {"type": "string", "enum": ["true"]},
        ),
    }
    docs["RateLimit-Policy"][1]["pattern"] = r'^"default";q=\d+;w=\d+$'
    docs["RateLimit"][1]["pattern"] = r'^"default";r=\d+;t=\d+$'
    # Two variants each: whether a header is always sent depends on the answer, and a $ref cannot add `required`.
    out: dict[str, dict[str, Any]] = {}
    for name, (text, schema) in docs.items():
        out[name] = {"description": text, "required": True, "schema": schema}
        out[name + _OPTIONAL] = {"description": text + " Sent on some answers only.", "schema": schema}
    return out


def _description(settings: Settings) -> str:
    return f"""Vouch runs AI agents on evaluation tasks; at checkpoints the agent stops until a human reviewer \
approves or rejects. Create a task, poll its status (or watch its chat), and decide its checkpoints.

**Authentication.** Every operation except the documentation takes an API key: \
`Authorization: Bearer {PREFIX}…`, {KEY_LENGTH} characters. Keys are made on the `/keys` page (or with \
`vouch keys create`). Each operation names the scope it needs; `eval:manage` includes `eval:create` and \
`eval:read`. A key sees only its own user's executions: another user's id is a 404, like an unknown one.

**Errors** are `application/problem+json` (RFC 9457) with `type`, `title`, `status`, `detail`, a stable `code` \
and `success: false`; invalid input is listed in `errors[]` as JSON pointers (or query `parameter`s). No text \
field accepts the NUL character (U+0000). A method a \
path does not serve is a 405 `method_not_allowed` whose `Allow` header lists the ones it does.

**Limits**, per API key: {settings.rate_limit} requests per {settings.rate_limit_window_seconds} seconds (a 429 \
`rate_limit_exceeded` past that, with `Retry-After`; every keyed answer carries the `RateLimit-Policy`, \
`RateLimit` and `X-RateLimit-*` headers) and {settings.concurrency_limit} executions queued, running or awaiting \
review at once (a 429 `concurrent_limit_exceeded`). Bodies are at most 1 MiB.

**Request ids.** Every answer carries `X-Request-Id`; send your own to find the request in the service's logs.

Times are UTC, ISO 8601 with milliseconds (`2025-01-31T09:30:00.000Z`)."""


class _Builder:
    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.headers = _header_docs(settings)

    def header(self, name: str, *, required: bool) -> dict[str, Any]:
        return {"$ref": f"#/components/headers/{name}{'' if required else _OPTIONAL}"}

    def answer_headers(self, required: tuple[str, ...], optional: tuple[str, ...] = ()) -> dict[str, Any]:
        out = {"X-Request-Id": self.header("X-Request-Id", required=True)}  # on every answer
        out.update({name: self.header(name, required=True) for name in required})
        out.update({name: self.header(name, required=False) for name in optional})
        return out

    def problem(self, status: int, codes: list[str], keyed: bool) -> dict[str, Any]:
        required: tuple[str, ...] = {401: ("WWW-Authenticate",), 429: ("Retry-After",)}.get(status, ())
        optional: tuple[str, ...] = ()
        if "insufficient_scope" in codes and "not_assigned_reviewer" in codes:
            required, optional = (), ("WWW-Authenticate",)
        elif "insufficient_scope" in codes:
            required = ("WWW-Authenticate",)
        if "idempotency_key_in_use" in codes:
            optional = ("Retry-After",)
        # A 401 is never charged (no valid key); the other answers are when the key got that far.
        if keyed and status != 401:
            if status in _CHARGED_STATUSES:
                required += _RATE_HEADERS
            else:
                optional += _RATE_HEADERS
        meanings = "\n".join(f"- `{code}`: {PROBLEM_CODES[code][1]}" for code in codes)
        return {
            "description": f"{ApiError(status, codes[0], '').title}.\n\n{meanings}",
            "headers": self.answer_headers(required, optional),
            "content": {
                "application/problem+json": {
                    "schema": {
                        "allOf": [
                            {"$ref": "#/components/schemas/Problem"},
                            {"properties": {"status": {"const": status}, "code": {"enum": codes}}},
                        ]
                    },
                    "examples": {code: {"$ref": f"#/components/examples/{code}"} for code in codes},
                }
            },
        }

    def operation(self, op: Operation) -> dict[str, Any]:
        keyed = op.scope is not None
        out: dict[str, Any] = {
            "operationId": op.operation_id,
            "tags": [op.tag],
            "summary": op.summary,
            "description": op.description,
            "parameters": [{"$ref": f"#/components/parameters/{name}"} for name in (*op.parameters, "RequestId")],
        }
        if op.scope is None:
            out["security"] = []
            out["description"] += "\n\nPublic: no API key needed."
        else:
            out["security"] = [{"bearerAuth": []}]
            out["x-required-scope"] = op.scope
            implied = "" if op.scope == "eval:manage" else " (or `eval:manage`, which includes it)"
            out["description"] += f"\n\nRequires an API key with the `{op.scope}` scope{implied}."
        if op.body_schema:
            media = {"schema": {"$ref": f"#/components/schemas/{op.body_schema}"}, "examples": op.body_examples}
            out["requestBody"] = {"required": True, "content": {"application/json": media}}
        success: dict[str, Any] = {
            "description": op.success_description,
            "headers": self.answer_headers((_RATE_HEADERS if keyed else ()) + op.success_headers, op.optional_headers),
        }
        if op.success_schema:
            success["content"] = {op.success_media: {"schema": {"$ref": f"#/components/schemas/{op.success_schema}"}}}
        elif op.success_status != 204:
            kind = "string" if op.success_media == "text/html" or op.more_media else "object"
            success["content"] = {media: {"schema": {"type": kind}} for media in (op.success_media, *op.more_media)}
        if op.links:
            success["links"] = op.links
        responses: dict[str, Any] = {str(op.success_status): success}
        by_status: dict[int, list[str]] = {}
        for code in op.problems:
            by_status.setdefault(PROBLEM_CODES[code][0], []).append(code)
        for status in sorted(by_status):
            responses[str(status)] = self.problem(status, by_status[status], keyed)
        out["responses"] = responses
        return out

    def document(self) -> dict[str, Any]:
        paths: dict[str, dict[str, Any]] = {}
        for op in OPERATIONS:
            paths.setdefault(op.path, {})[op.method] = self.operation(op)
        return {
            "openapi": "3.1.0",
            "jsonSchemaDialect": "https://spec.openapis.org/oas/3.1/dialect/base",
            "info": {
                "title": "Vouch API",
                "version": "0.1.0",
                "summary": "Evaluation tasks run by AI agents that pause at checkpoints for a human's review.",
                "description": _description(self.settings),
                "license": {"name": "Apache-2.0", "identifier": "Apache-2.0"},
            },
            # Relative: the document works behind whatever base URL serves it.
            "servers": [{"url": "/"}],
            "security": [{"bearerAuth": []}],
            "tags": [
                {"name": "Executions", "description": "Create evaluation tasks and follow their executions."},
                {"name": "Manage", "description": "Change, cancel and delete your executions (`eval:manage`)."},
                {"name": "Review", "description": "Decide checkpoints as their assigned reviewer."},
                {"name": "Suites", "description": "Run the same tasks across models and compare the results."},
                {
                    "name": "External agent",
                    "description": "Drive an execution created with `agentModel: external` from your own agent "
                    "(`eval:create`).",
                },
                {"name": "Documentation", "description": "This description of the API."},
            ],
            "paths": paths,
            "components": {
                "schemas": component_schemas(),
                "parameters": _PARAMETERS,
                "headers": self.headers,
                "examples": {
                    code: {"summary": meaning, "value": ApiError(status, code, meaning).body()}
                    for code, (status, meaning) in PROBLEM_CODES.items()
                },
                "securitySchemes": {
                    "bearerAuth": {
                        "type": "http",
                        "scheme": "bearer",
                        "bearerFormat": f"{PREFIX}<32 base62 characters>",
                        "description": f"An API key: `{PREFIX}` and 32 base62 characters, {KEY_LENGTH} in all; "
                        "the last 6 are a checksum. Made on the `/keys` page; shown once.",
                    }
                },
            },
        }


def build_document(settings: Settings) -> dict[str, Any]:
    """The OpenAPI 3.1 document for an app running with `settings` (a fresh dict each call)."""
    return _Builder(settings).document()


@dataclass(frozen=True)
class Published:
    """The document as served: built once per app."""

    document: dict[str, Any]
    body: bytes
    etag: str


_EXTENSION = "vouch.openapi"


def published() -> Published:
    """This app's document, built on first use (every request of a process sees the same one)."""
    found: Published | None = current_app.extensions.get(_EXTENSION)
    if found is None:
        document = build_document(services().settings)
        body = json.dumps(document, ensure_ascii=False, separators=(",", ":")).encode()
        found = Published(document, body, hashlib.sha256(body).hexdigest()[:32])
        current_app.extensions[_EXTENSION] = found
    return found
