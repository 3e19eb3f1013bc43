"""/api/openapi.json and /api/docs: a valid OpenAPI 3.1 document of every route, and a page generated from it.

The live behaviour against the document is tests/api/test_openapi_contract.py (schemathesis); these tests
keep the document itself honest: every route on the app is in it, its scopes are the ones the views demand,
its enums are the code's, and the page shows all of it, escaped.
"""

from __future__ import annotations

import re
from typing import Any, get_args

import pytest
from openapi_spec_validator import OpenAPIV31SpecValidator
from pydantic import ValidationError

from api.apidocs import doc_text
from api.openapi import DOCS_PATH, OPENAPI_PATH, build_document
from api.openapi_answers import PROBLEM_CODES
from api.openapi_fields import Channel, ExecutionStatus
from api.openapi_operations import OPERATIONS
from api.openapi_schemas import component_schemas
from api.schemas import CreateTaskIn
from core.apikeys import SCOPES
from core.vocabulary import CHANNELS, EXECUTION_STATUSES, FINAL
from tests.api.helpers import CREATE, account, assert_problem, task
from tests.conftest import Service, bearer
from tests.support.html import only_our_script_files

_IGNORED_METHODS = {"HEAD", "OPTIONS"}  # answered by Quart itself on every route


def _template(path: str) -> str:
    """`/a/<execution_id>` and `/a/{executionId}` both as `/a/{}`."""
    return re.sub(r"<[^>]+>|\{[^}]+\}", "{}", path)


async def _document(service: Service) -> dict[str, Any]:
    response = await service.client.get(OPENAPI_PATH)
    assert response.status_code == 200
    document: dict[str, Any] = await response.get_json()
    return document


async def test_the_document_is_public_valid_openapi_31_and_cached(api_only: Service) -> None:
    response = await api_only.client.get(OPENAPI_PATH)  # no key: it describes, it does not act
    assert response.status_code == 200
    assert response.mimetype == "application/json"
    assert "max-age" in response.headers["Cache-Control"]
    document = await response.get_json()
    assert document["openapi"] == "3.1.0"
    assert document["servers"] == [{"url": "/"}]  # relative: works behind any base URL
    assert list(OpenAPIV31SpecValidator(document).iter_errors()) == []
    assert document == build_document(api_only.settings)
    again = await api_only.client.get(OPENAPI_PATH, headers={"If-None-Match": response.headers["ETag"]})
    assert again.status_code == 304


async def test_every_api_route_on_the_app_is_documented_and_nothing_else(api_only: Service) -> None:
    document = await _document(api_only)
    routed = {
        (method, _template(rule.rule))
        for rule in api_only.app.url_map.iter_rules()
        if rule.rule.startswith("/api/")
        for method in (rule.methods or set()) - _IGNORED_METHODS
    }
    documented = {(method.upper(), _template(path)) for path, item in document["paths"].items() for method in item}
    assert routed == documented


async def test_every_operation_is_fully_described(api_only: Service) -> None:
    document = await _document(api_only)
    ids = []
    for path, item in document["paths"].items():
        for method, op in item.items():
            ids.append(op["operationId"])
            assert op["summary"] and op["description"], (method, path)
            assert "500" in op["responses"], (method, path)
            for response in op["responses"].values():
                assert "X-Request-Id" in response["headers"], (method, path)
            if op["security"]:
                assert op["x-required-scope"] in SCOPES
                assert op["x-required-scope"] in op["description"]
                assert {"401", "403", "429"} <= set(op["responses"]), (method, path)
            for name in re.findall(r"\{(\w+)\}", path):
                params = [document["components"]["parameters"][p["$ref"].rsplit("/", 1)[1]] for p in op["parameters"]]
                assert {"name": name, "in": "path"}.items() <= next(p for p in params if p["name"] == name).items()
    assert len(ids) == len(set(ids)) == len(OPERATIONS)
    # Every field says what it is for; a field added to a model without a description fails here.
    for name, model in document["components"]["schemas"].items():
        for field, schema in model.get("properties", {}).items():
            assert schema.get("description"), f"{name}.{field}"
    assert set(CreateTaskIn.model_fields) == set(document["components"]["schemas"]["CreateTaskIn"]["properties"])


def test_the_document_enums_are_the_code_s() -> None:
    assert set(get_args(ExecutionStatus)) == set(EXECUTION_STATUSES) and FINAL <= set(EXECUTION_STATUSES)
    assert set(get_args(Channel)) == set(CHANNELS)
    assert {op.scope for op in OPERATIONS} - {None} <= set(SCOPES)
    assert {code for op in OPERATIONS for code in op.problems} <= set(PROBLEM_CODES)


def _pattern(schema: dict[str, Any]) -> str:
    found = schema.get("pattern") or next(option["pattern"] for option in schema["anyOf"] if "pattern" in option)
    return str(found)


# Issue 19: the single-line fields and the webhook URL, as the document and the models judge them.
_LINE_CASES = [
    ("Weekly report", True), ("Café — « revue » ✓", True), ("a b", True),
    ("a\r\nBcc: x@example.com", False), ("a\nb", False), ("a\tb", False), ("a\x1bb", False), ("a\x7fb", False),
    ("a\x85b", False), ("a\u2028b", False),
]


def test_the_documented_single_line_and_url_patterns_are_the_models_rules() -> None:
    schemas = component_schemas()
    for schema, field in (("CreateTaskIn", "taskName"), ("CheckpointIn", "stage")):
        pattern = _pattern(schemas[schema]["properties"][field])
        for value, good in _LINE_CASES:
            assert (re.search(pattern, value) is not None) is good, (field, value)
            checkpoint = {"stage": value if field == "stage" else "s", "verificationQuestion": "q?"}
            body = task(taskName=value if field == "taskName" else "t", checkpoints=[checkpoint],
                        assignedReviewer="r@example.com")
            try:
                CreateTaskIn.model_validate(body)
                accepted = True
            except ValidationError:
                accepted = False
            assert accepted is good, (field, value)
    for schema in ("CreateTaskIn", "ExecutionPatchIn"):
        pattern = _pattern(schemas[schema]["properties"]["webhookUrl"])
        for value, good in _LINE_CASES:
            url = f"https://hooks.example.com/{value}"
            assert (re.search(pattern, url) is not None) is good, (schema, url)
            assert (re.search(pattern, f"https://hooks.exa{value}mple.com/") is not None) is good


# A key that lacks each scope: eval:manage includes the other two, so it is the only way to lack nothing.
_LACKING = {"eval:create": ("eval:read",), "eval:read": ("eval:create",), "eval:manage": ("eval:create", "eval:read")}


@pytest.mark.parametrize("operation", [op for op in OPERATIONS if op.scope], ids=lambda op: op.operation_id)
async def test_each_operation_demands_the_scope_it_documents(api_only: Service, operation: Any) -> None:
    path = operation.path.replace("{executionId}", "exe_unknown").replace("{checkpointId}", "chk_unknown")
    lacking = await account(api_only, "lacking@example.com", *_LACKING[operation.scope])
    having = await account(api_only, "having@example.com", operation.scope)
    for who, expected in ((lacking, 403), (having, None)):
        response = await api_only.client.open(path, method=operation.method.upper(), headers=bearer(who.key), json={})
        payload = await response.get_json()
        if expected:
            assert_problem(response, payload, 403, "insufficient_scope")
        else:
            assert response.status_code != 403, payload


async def test_the_docs_page_shows_every_operation_from_the_document(api_only: Service) -> None:
    response = await api_only.client.get(DOCS_PATH)  # no key
    assert response.status_code == 200
    assert response.mimetype == "text/html"
    assert "script-src 'self'" in response.headers["Content-Security-Policy"]
    page = await response.get_data(as_text=True)
    document = await _document(api_only)
    for path, item in document["paths"].items():
        for method, op in item.items():
            assert f'id="{op["operationId"]}"' in page
            assert f'href="#{op["operationId"]}"' in page  # in the table of contents
            assert f"<code>{path}</code>" in page
            assert f">{method.upper()}</span>" in page
            if "x-required-scope" in op:
                assert f"<code>{op['x-required-scope']}</code>" in page
    for code in PROBLEM_CODES:
        if code != "method_not_allowed":  # answered by the router, not by an operation
            assert f"<code>{code}</code>" in page, code
    for name in document["components"]["schemas"]:
        assert f'id="schema-{name}"' in page
    assert only_our_script_files(page)
    assert not re.search(r'(?:src|href)="(?:https?:)?//', page), "no resource from another origin (no CDN)"
    assert "&#34;taskName&#34;: &#34;Release note&#34;" in page  # the create example, escaped


def test_descriptions_are_escaped_before_their_markup_is_applied() -> None:
    html = str(doc_text("Use `<b>` **now** & <script>alert(1)</script>\n\n- `a`: one\n- two"))
    assert html == (
        "<p>Use <code>&lt;b&gt;</code> <strong>now</strong> &amp; &lt;script&gt;alert(1)&lt;/script&gt;</p>"
        "<ul><li><code>a</code>: one</li><li>two</li></ul>"
    )


# Found by the contract test on PostgreSQL, which cannot store or even compare text holding U+0000.


async def test_a_nul_character_in_a_field_is_a_422_not_a_500(api_only: Service) -> None:
    caller = await account(api_only, "nul@example.com", "eval:manage")
    checkpoint = {"stage": "Send", "verificationQuestion": "Send\u0000it?"}
    body = task(assignedReviewer="nul@example.com", checkpoints=[checkpoint])
    response = await api_only.client.post(CREATE, json=body, headers=bearer(caller.key))
    payload = await response.get_json()
    assert_problem(response, payload, 422, "validation_failed")
    assert payload["errors"] == [
        {"pointer": "/checkpoints/0/verificationQuestion", "detail": "must not contain the NUL character (U+0000)"}
    ]


async def test_a_nul_character_in_a_path_is_a_404_not_a_500(api_only: Service) -> None:
    caller = await account(api_only, "nulpath@example.com", "eval:manage")
    response = await api_only.client.get("/api/eval/status/exe_a%00b", headers=bearer(caller.key))
    assert_problem(response, await response.get_json(), 404, "not_found")
