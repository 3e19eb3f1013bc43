"""Serving the API's description: `/api/openapi.json` and the reference page `/api/docs`.

Both are public: they describe the API, they do not act. The page is rendered on the server from the same
document (api/openapi.py), so it cannot disagree with it; it needs no script (the CSP forbids inline script,
and this machine's users may have no internet for a CDN-hosted viewer).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from markupsafe import Markup, escape
from quart import Blueprint, Response, render_template, request

from api.openapi import published
from api.pages import CSP

blueprint = Blueprint("apidocs", __name__, url_prefix="/api")

# The document changes only with a deploy: let clients keep it briefly, then revalidate with the ETag.
_CACHE = "public, max-age=300"


@blueprint.get("/openapi.json")
async def openapi_json() -> Response:
    doc = published()
    response = Response(doc.body, content_type="application/json")
    response.set_etag(doc.etag)
    response.headers["Cache-Control"] = _CACHE
    response.headers["Access-Control-Allow-Origin"] = "*"  # tools in other origins may read a public description
    conditional: Response = await response.make_conditional(request)
    return conditional


@blueprint.get("/docs")
async def docs_page() -> Response:
    doc = published().document
    page = await render_template(
        "api/docs.html",
        info=doc["info"],
        security=doc["components"]["securitySchemes"]["bearerAuth"],
        tags=_tags(doc),
        schemas=_schemas(doc),
    )
    response = Response(page, content_type="text/html; charset=utf-8")
    response.headers["Content-Security-Policy"] = CSP
    response.headers["X-Content-Type-Options"] = "nosniff"
    response.headers["Cache-Control"] = _CACHE
    return response


@blueprint.app_template_filter("doc_text")
def doc_text(text: str) -> Markup:
    """The small Markdown subset the document's descriptions use (paragraphs, `- ` lists, **bold**, `code`),
    escaped first, so nothing in a description can become markup of its own."""
    blocks = []
    for block in text.strip().split("\n\n"):
        lines = block.split("\n")
        if all(line.startswith("- ") for line in lines):
            items = "".join(f"<li>{_inline(line[2:])}</li>" for line in lines)
            blocks.append(f"<ul>{items}</ul>")
        else:
            blocks.append(f"<p>{_inline(' '.join(lines))}</p>")
    return Markup("".join(blocks))


def _inline(text: str) -> str:
    html = str(escape(text))  # backticks and asterisks survive escaping unchanged
    html = re.sub(r"`([^`]+)`", r"<code>\1</code>", html)
    return re.sub(r"\*\*([^*]+)\*\*", r"<strong>\1</strong>", html)


@dataclass(frozen=True)
class Field:
    name: str
    type: str
    required: bool
    description: str
    where: str = ""


@dataclass(frozen=True)
class Answer:
    status: str
    description: str
    media: str | None
    schema: str | None
    headers: list[tuple[str, bool]]
    codes: list[tuple[str, str]]


@dataclass(frozen=True)
class OperationView:
    id: str
    method: str
    path: str
    summary: str
    description: str
    scope: str | None
    parameters: list[Field]
    body_schema: str | None
    body_examples: list[tuple[str, str]]
    answers: list[Answer]


@dataclass(frozen=True)
class SchemaView:
    name: str
    description: str
    fields: list[Field]
    kind: str


def ref_name(ref: str) -> str:
    return ref.rsplit("/", 1)[-1]


def type_text(schema: dict[str, Any]) -> str:
    """A schema as a reader wants it: `string (1 to 200 characters)`, `array of CheckpointIn`, `string | null`."""
    if "$ref" in schema:
        return ref_name(schema["$ref"])
    for combiner in ("anyOf", "oneOf"):
        if combiner in schema:
            return " | ".join(type_text(part) for part in schema[combiner])
    if "const" in schema:
        return json.dumps(schema["const"])
    if "enum" in schema:
        return " | ".join(json.dumps(value) for value in schema["enum"])
    kind = schema.get("type", "any")
    text = " | ".join(kind) if isinstance(kind, list) else str(kind)
    if kind == "array":
        text = f"array of {type_text(schema.get('items', {}))}"
    notes = []
    if "format" in schema:
        notes.append(schema["format"])
    low, high = schema.get("minLength", schema.get("minimum")), schema.get("maxLength", schema.get("maximum"))
    unit = " characters" if "minLength" in schema or "maxLength" in schema else ""
    if low is not None and high is not None:
        notes.append(f"{low} to {high}{unit}")
    elif high is not None:
        notes.append(f"at most {high}{unit}")
    elif low is not None:
        notes.append(f"at least {low}{unit}")
    if "maxItems" in schema:
        notes.append(f"at most {schema['maxItems']}")
    if schema.get("pattern") == r"\S":
        notes.append("not blank")
    if "default" in schema:
        notes.append(f"default {json.dumps(schema['default'])}")
    return f"{text} ({', '.join(notes)})" if notes else text


def resolve_ref(doc: dict[str, Any], item: dict[str, Any]) -> dict[str, Any]:
    """`item`, or the component its `$ref` names."""
    if "$ref" not in item:
        return item
    section, name = item["$ref"].split("/")[-2:]
    found: dict[str, Any] = doc["components"][section][name]
    return found


def _answer(doc: dict[str, Any], status: str, response: dict[str, Any]) -> Answer:
    media, schema, codes = None, None, []
    for media_type, content in response.get("content", {}).items():  # at most one
        media = media_type
        shape = content["schema"]
        parts = shape.get("allOf", [shape])
        schema = next((ref_name(part["$ref"]) for part in parts if "$ref" in part), None)
        examples = content.get("examples", {}).items()
        codes = [(code, resolve_ref(doc, example)["summary"]) for code, example in examples]
    headers = [
        (name, bool(resolve_ref(doc, header).get("required"))) for name, header in response.get("headers", {}).items()
    ]
    # Problem descriptions end with the list of codes, which the page shows as a table instead.
    description = response["description"].split("\n\n")[0] if codes else response["description"]
    return Answer(status, description, media, schema, headers, codes)


def _operation(doc: dict[str, Any], method: str, path: str, op: dict[str, Any]) -> OperationView:
    parameters = []
    for item in op.get("parameters", []):
        param = resolve_ref(doc, item)
        parameters.append(
            Field(
                param["name"],
                type_text(param["schema"]),
                bool(param.get("required")),
                param["description"],
                param["in"],
            )
        )
    body_schema, body_examples = None, []
    if "requestBody" in op:
        media = op["requestBody"]["content"]["application/json"]
        body_schema = ref_name(media["schema"]["$ref"])
        body_examples = [(ex["summary"], json.dumps(ex["value"], indent=2)) for ex in media["examples"].values()]
    return OperationView(
        id=op["operationId"],
        method=method.upper(),
        path=path,
        summary=op["summary"],
        description=op["description"],
        scope=op.get("x-required-scope"),
        parameters=parameters,
        body_schema=body_schema,
        body_examples=body_examples,
        answers=[_answer(doc, status, response) for status, response in op["responses"].items()],
    )


def _tags(doc: dict[str, Any]) -> list[tuple[dict[str, Any], list[OperationView]]]:
    grouped: dict[str, list[OperationView]] = {tag["name"]: [] for tag in doc["tags"]}
    for path, item in doc["paths"].items():
        for method, op in item.items():
            grouped[op["tags"][0]].append(_operation(doc, method, path, op))
    return [(tag, grouped[tag["name"]]) for tag in doc["tags"]]


def _schemas(doc: dict[str, Any]) -> list[SchemaView]:
    views = []
    for name, schema in doc["components"]["schemas"].items():
        required = set(schema.get("required", []))
        fields = [
            Field(prop_name, type_text(prop), prop_name in required, prop.get("description", ""))
            for prop_name, prop in schema.get("properties", {}).items()
        ]
        views.append(SchemaView(name, schema.get("description", ""), fields, type_text(schema)))
    return views
