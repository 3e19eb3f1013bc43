"""POST /api/eval/create-task-agent: the answer, its Location, and every validation rule."""

from __future__ import annotations

from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
import sqlalchemy as sa

from core.links import chat_view_token_valid
from core.models import Checkpoint, Execution
from tests.api.helpers import (
    CREATE,
    REVIEWER,
    account,
    assert_problem,
    create,
    create_ok,
    get_status,
    status_path,
    task,
)
from tests.conftest import Service, bearer

CHECKPOINT = {"stage": "Before writing", "description": "The note is written", "verificationQuestion": "Write it?"}


async def test_created_answer_has_exactly_the_documented_fields(api_only: Service) -> None:
    acct = await account(api_only, "owner@example.com", "eval:create", "eval:read")
    body = task(checkpoints=[CHECKPOINT, {**CHECKPOINT, "stage": "Second"}], assignedReviewer=REVIEWER)
    response = await api_only.client.post(CREATE, json=body, headers=bearer(acct.key))
    payload = await response.get_json()

    assert response.status_code == 201, payload
    assert response.mimetype == "application/json"
    assert set(payload) == {"success", "executionId", "chatUrl", "checkpointCount"}
    assert payload["success"] is True
    assert payload["checkpointCount"] == 2
    execution_id = payload["executionId"]
    assert isinstance(execution_id, str) and execution_id

    prefix = f"{api_only.settings.base_url}/chat/{execution_id}?token="
    assert payload["chatUrl"].startswith(prefix)
    token = parse_qs(urlsplit(payload["chatUrl"]).query)["token"][0]
    assert chat_view_token_valid(api_only.settings.secret_key, execution_id, token)

    assert response.headers["Location"] == f"{api_only.settings.base_url}{status_path(execution_id)}"
    # The Location really names the new execution.
    location_path = urlsplit(response.headers["Location"]).path
    followed = await api_only.client.get(location_path, headers=bearer(acct.key))
    record = await followed.get_json()
    assert followed.status_code == 200, record
    assert record["executionId"] == execution_id
    assert record["checkpointCount"] == 2
    assert record["chatUrl"] == payload["chatUrl"]


async def test_each_creation_is_a_new_execution(api_only: Service) -> None:
    acct = await account(api_only, "owner@example.com", "eval:create")
    first = await create_ok(api_only, acct.key, task())
    second = await create_ok(api_only, acct.key, task())
    assert first != second


async def test_without_checkpoints_count_is_zero(api_only: Service) -> None:
    acct = await account(api_only, "owner@example.com", "eval:create")
    code, payload = await create(api_only, acct.key, task())
    assert code == 201, payload
    assert payload["checkpointCount"] == 0


async def test_test_mode_defaults_to_with_verification(api_only: Service) -> None:
    acct = await account(api_only, "owner@example.com", "eval:manage")
    default = await create_ok(api_only, acct.key, task())
    explicit = await create_ok(api_only, acct.key, task(testMode="without-verification"))
    assert (await get_status(api_only, acct.key, default))["testMode"] == "with-verification"
    assert (await get_status(api_only, acct.key, explicit))["testMode"] == "without-verification"


async def test_reviewer_address_is_normalised(api_only: Service) -> None:
    acct = await account(api_only, "owner@example.com", "eval:manage")
    execution_id = await create_ok(
        api_only, acct.key, task(checkpoints=[CHECKPOINT], assignedReviewer="  Reviewer@Example.COM ")
    )
    record = await get_status(api_only, acct.key, execution_id)
    assert record["assignedReviewer"] == "reviewer@example.com"


ACCEPTED: list[tuple[str, dict[str, Any]]] = [
    ("without-verification", {"testMode": "without-verification", "checkpoints": [CHECKPOINT]}),
    ("no-checkpoints", {"testMode": "with-verification"}),
    ("empty-checkpoints", {"testMode": "with-verification", "checkpoints": []}),
    ("https-webhook", {"webhookUrl": "https://hooks.example.com/done?x=1"}),
    ("http-webhook", {"webhookUrl": "http://hooks.example.com/done"}),
    (
        "checkpoint-without-description",
        {"checkpoints": [{"stage": "s", "verificationQuestion": "q?"}], "assignedReviewer": REVIEWER},
    ),
    ("auto-detect-false", {"autoDetectCheckpoints": False}),
    # Issue 19: names are single lines, but any other character is fine; descriptions and questions keep
    # their line breaks (and tabs).
    (
        "single-line-names-multi-line-texts",
        {
            "taskName": "Café — « revue » ✓",
            "taskDescription": "Line one\n\tLine two\r\nLine three",
            "checkpoints": [{"stage": "Étape 1", "description": "a\nb", "verificationQuestion": "Is it\nright?"}],
            "assignedReviewer": REVIEWER,
        },
    ),
    ("taskName-trailing-line-break-is-trimmed", {"taskName": "Weekly report\n"}),
]


async def test_accepted_bodies(api_only: Service, subtests: pytest.Subtests) -> None:
    acct = await account(api_only, "owner@example.com", "eval:manage")
    for name, fields in ACCEPTED:
        with subtests.test(msg=name):
            code, payload = await create(api_only, acct.key, task(**fields))
            assert code == 201, payload
            record = await get_status(api_only, acct.key, payload["executionId"])
            assert record["checkpointCount"] == len(fields.get("checkpoints", []))
            assert record["assignedReviewer"] == fields.get("assignedReviewer")


def without(key: str) -> dict[str, Any]:
    body = task()
    del body[key]
    return body


WITH_CHECKPOINT = {"checkpoints": [CHECKPOINT], "assignedReviewer": REVIEWER}


INVALID: list[tuple[str, dict[str, Any], str]] = [
    ("taskName-missing", without("taskName"), "/taskName"),
    ("taskName-empty", task(taskName=""), "/taskName"),
    ("taskName-whitespace", task(taskName=" \t"), "/taskName"),
    ("taskName-null", task(taskName=None), "/taskName"),
    ("taskName-number", task(taskName=42), "/taskName"),
    ("taskDescription-missing", without("taskDescription"), "/taskDescription"),
    ("taskDescription-empty", task(taskDescription=""), "/taskDescription"),
    ("taskDescription-whitespace", task(taskDescription=" \n "), "/taskDescription"),
    ("testMode-unknown", task(testMode="sometimes"), "/testMode"),
    ("testMode-case", task(testMode="With-Verification"), "/testMode"),
    ("testMode-empty", task(testMode=""), "/testMode"),
    ("reviewer-invalid", task(**{**WITH_CHECKPOINT, "assignedReviewer": "not-an-email"}), "/assignedReviewer"),
    ("reviewer-two-ats", task(**{**WITH_CHECKPOINT, "assignedReviewer": "a@b@c.com"}), "/assignedReviewer"),
    ("reviewer-invalid-no-checkpoints", task(assignedReviewer="nobody"), "/assignedReviewer"),
    ("reviewer-missing-default-mode", task(checkpoints=[CHECKPOINT]), "/assignedReviewer"),
    (
        "reviewer-missing-with-verification",
        task(checkpoints=[CHECKPOINT], testMode="with-verification"),
        "/assignedReviewer",
    ),
    ("reviewer-missing-auto-detect", task(autoDetectCheckpoints=True), "/assignedReviewer"),
    ("reviewer-blank", task(checkpoints=[CHECKPOINT], assignedReviewer=" "), "/assignedReviewer"),
    ("webhook-ftp", task(webhookUrl="ftp://hooks.example.com/x"), "/webhookUrl"),
    ("webhook-javascript", task(webhookUrl="javascript:alert(1)"), "/webhookUrl"),
    ("webhook-no-scheme", task(webhookUrl="hooks.example.com/x"), "/webhookUrl"),
    ("webhook-no-host", task(webhookUrl="http://"), "/webhookUrl"),
    ("checkpoints-object", task(checkpoints={"stage": "s"}), "/checkpoints"),
    ("checkpoint-string", task(checkpoints=["review"], assignedReviewer=REVIEWER), "/checkpoints/0"),
    (
        "stage-missing",
        task(checkpoints=[{"verificationQuestion": "q?"}], assignedReviewer=REVIEWER),
        "/checkpoints/0/stage",
    ),
    ("stage-empty", task(checkpoints=[{**CHECKPOINT, "stage": ""}], assignedReviewer=REVIEWER), "/checkpoints/0/stage"),
    (
        "stage-whitespace",
        task(checkpoints=[{**CHECKPOINT, "stage": " "}], assignedReviewer=REVIEWER),
        "/checkpoints/0/stage",
    ),
    (
        "question-missing",
        task(checkpoints=[CHECKPOINT, {"stage": "s"}], assignedReviewer=REVIEWER),
        "/checkpoints/1/verificationQuestion",
    ),
    (
        "question-whitespace",
        task(checkpoints=[CHECKPOINT, {**CHECKPOINT, "verificationQuestion": " "}], assignedReviewer=REVIEWER),
        "/checkpoints/1/verificationQuestion",
    ),
    (
        "checkpoint-unknown-field",
        task(checkpoints=[{**CHECKPOINT, "question": "q?"}], assignedReviewer=REVIEWER),
        "/checkpoints/0/question",
    ),
    ("auto-detect-not-boolean", task(autoDetectCheckpoints=[1]), "/autoDetectCheckpoints"),
    ("agent-model-unknown-provider", task(agentModel="mistral:large"), "/agentModel"),
    ("agent-model-without-name", task(agentModel="openai:"), "/agentModel"),
    ("unknown-field-misspelt", task(testmode="without-verification"), "/testmode"),
    ("unknown-field", task(priority="high"), "/priority"),
    ("taskName-too-long", task(taskName="x" * 201), "/taskName"),
    # Issue 19: what goes into a mail header is one line.
    ("taskName-crlf", task(taskName="Report\r\nBcc: victim@example.com"), "/taskName"),
    ("taskName-lf", task(taskName="Report\nmore"), "/taskName"),
    ("taskName-tab", task(taskName="Report\tQ3"), "/taskName"),
    ("taskName-escape", task(taskName="Report\x1b[31m"), "/taskName"),
    ("taskName-del", task(taskName="Report\x7f"), "/taskName"),
    ("taskName-next-line-c1", task(taskName="Report\x85more"), "/taskName"),
    ("taskName-line-separator", task(taskName="Report\u2028more"), "/taskName"),
    (
        "stage-crlf",
        task(checkpoints=[{**CHECKPOINT, "stage": "Send\r\nBcc: victim@example.com"}], assignedReviewer=REVIEWER),
        "/checkpoints/0/stage",
    ),
    (
        "stage-vertical-tab",
        task(checkpoints=[CHECKPOINT, {**CHECKPOINT, "stage": "a\x0bb"}], assignedReviewer=REVIEWER),
        "/checkpoints/1/stage",
    ),
    ("webhook-crlf", task(webhookUrl="https://hooks.example.com/a\r\nX-Injected: 1"), "/webhookUrl"),
    ("webhook-lf-in-host", task(webhookUrl="https://hooks.exa\nmple.com/"), "/webhookUrl"),
    ("webhook-tab", task(webhookUrl="https://hooks.example.com/a\tb"), "/webhookUrl"),
    ("webhook-nul-like-control", task(webhookUrl="https://hooks.example.com/\x01"), "/webhookUrl"),
]


async def test_invalid_bodies_are_422_naming_the_field(api_only: Service, subtests: pytest.Subtests) -> None:
    acct = await account(api_only, "owner@example.com", "eval:create")
    for name, body, pointer in INVALID:
        with subtests.test(msg=name):
            response = await api_only.client.post(CREATE, json=body, headers=bearer(acct.key))
            payload = await response.get_json()

            assert_problem(response, payload, 422, "validation_failed", "Unprocessable Content")
            pointers = [error["pointer"] for error in payload["errors"]]
            assert pointer in pointers, payload
            assert all(isinstance(error["detail"], str) and error["detail"] for error in payload["errors"])
            field = pointer.rsplit("/", 1)[1]
            assert field in payload["detail"], payload


async def test_every_bad_field_is_reported(api_only: Service) -> None:
    acct = await account(api_only, "owner@example.com", "eval:create")
    body = {
        "taskName": "",
        "testMode": "maybe",
        "webhookUrl": "ftp://x.example.com",
        "checkpoints": [{"stage": " "}],
    }
    response = await api_only.client.post(CREATE, json=body, headers=bearer(acct.key))
    payload = await response.get_json()
    assert_problem(response, payload, 422, "validation_failed")
    pointers = {error["pointer"] for error in payload["errors"]}
    assert {
        "/taskName",
        "/taskDescription",
        "/testMode",
        "/webhookUrl",
        "/checkpoints/0/stage",
        "/checkpoints/0/verificationQuestion",
    } <= pointers
    assert "more" in payload["detail"]


async def test_rejected_bodies_create_nothing(api_only: Service) -> None:
    acct = await account(api_only, "owner@example.com", "eval:manage")
    for body in (task(taskName=""), task(testMode="bogus"), task(checkpoints=[CHECKPOINT])):
        code, payload = await create(api_only, acct.key, body)
        assert code == 422, payload
        assert "executionId" not in payload
    async with api_only.db.reading() as session:
        assert await session.scalar(sa.select(sa.func.count()).select_from(Execution)) == 0
        assert await session.scalar(sa.select(sa.func.count()).select_from(Checkpoint)) == 0


async def test_non_json_content_type_is_415(api_only: Service, subtests: pytest.Subtests) -> None:
    acct = await account(api_only, "owner@example.com", "eval:create")
    for content_type in ("text/plain", "application/x-www-form-urlencoded", "application/jsonx", None):
        with subtests.test(msg=str(content_type)):
            headers = bearer(acct.key)
            if content_type is not None:
                headers["Content-Type"] = content_type
            response = await api_only.client.post(
                CREATE, data=b'{"taskName": "t", "taskDescription": "Write a note."}', headers=headers
            )
            payload = await response.get_json()
            assert_problem(response, payload, 415, "unsupported_media_type", "Unsupported Media Type")


async def test_json_content_type_with_charset_is_accepted(api_only: Service) -> None:
    acct = await account(api_only, "owner@example.com", "eval:create")
    response = await api_only.client.post(
        CREATE,
        data=b'{"taskName": "t", "taskDescription": "Write a note."}',
        headers={**bearer(acct.key), "Content-Type": "application/json; charset=utf-8"},
    )
    assert response.status_code == 201, await response.get_json()


UNPARSABLE = [
    (b"{not json", "invalid_json"),
    (b'{"taskName": "t",}', "invalid_json"),
    (b'{"taskName": "t"', "invalid_json"),
    (b"", "invalid_json"),
    (b"\xff\xfe\x00", "invalid_json"),  # not UTF-8
    (b"[]", "invalid_body"),
    (b'[{"taskName": "t", "taskDescription": "Write a note."}]', "invalid_body"),
    (b'"text"', "invalid_body"),
    (b"42", "invalid_body"),
    (b"true", "invalid_body"),
]


async def test_unparsable_or_non_object_json_is_400(api_only: Service, subtests: pytest.Subtests) -> None:
    acct = await account(api_only, "owner@example.com", "eval:create")
    for raw, code in UNPARSABLE:
        with subtests.test(msg=repr(raw)):
            response = await api_only.client.post(
                CREATE, data=raw, headers={**bearer(acct.key), "Content-Type": "application/json"}
            )
            assert_problem(response, await response.get_json(), 400, code, "Bad Request")


async def test_authentication_comes_before_body_checks(api_only: Service) -> None:
    response = await api_only.client.post(CREATE, data=b"{oops", headers={"Content-Type": "text/plain"})
    assert_problem(response, await response.get_json(), 401, "missing_api_key", "Unauthorized")


async def test_auto_detected_checkpoints_are_counted_and_follow_the_callers(api_only: Service) -> None:
    acct = await account(api_only, "owner@example.com", "eval:create", "eval:read")
    body = task(
        taskDescription="Fetch https://example.com/report, then e-mail it to boss@example.com and delete the draft.",
        checkpoints=[CHECKPOINT],
        autoDetectCheckpoints=True,
        assignedReviewer=REVIEWER,
    )
    created = await create_ok(api_only, acct.key, body)
    record = await get_status(api_only, acct.key, created)
    assert record["checkpointCount"] == 4
    assert [(c["origin"], c["stage"]) for c in record["checkpoints"]] == [
        ("caller", "Before writing"),
        ("auto", "Before sending e-mail"),
        ("auto", "Before calling an external service"),
        ("auto", "Before deleting"),
    ]
    assert record["autoDetectCheckpoints"] is True and record["agentModel"] == "offline"


async def test_a_task_may_choose_its_model(api_only: Service) -> None:
    acct = await account(api_only, "owner@example.com", "eval:create", "eval:read")
    created = await create_ok(api_only, acct.key, task(agentModel="openai:gpt-4.1-mini"))
    assert (await get_status(api_only, acct.key, created))["agentModel"] == "openai:gpt-4.1-mini"
