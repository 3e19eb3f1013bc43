"""The suite operations (issue 23): part of api/openapi_operations.py's `OPERATIONS`, in this order."""

from __future__ import annotations

from api.openapi_answers import BODY as _BODY
from api.openapi_answers import KEYED as _KEYED
from api.openapi_answers import Operation

_EXAMPLE_SUITE = {
    "name": "Release notes",
    "tasks": [
        {
            "taskName": "Release note",
            "taskDescription": 'Write a note called "notes.md" saying "v2 is out". Then summarise.',
            "assignedReviewer": "you@example.com",
            "checkpoints": [{"stage": "Write", "verificationQuestion": "Write the note?"}],
            "expected": "notes.md",
            "scorers": ["includes"],
        }
    ],
    "models": ["offline", "gpt-4o-mini"],
    "repeats": 3,
    "testMode": "both",
}

SUITE_OPERATIONS: tuple[Operation, ...] = (
    Operation(
        "post",
        "/api/eval/suites",
        "createSuite",
        "Suites",
        "Run tasks across models",
        "Plans tasks x models x repeats runs (twice as many with `testMode: both`, which runs every task with and "
        "without verification) and starts them. Each task body is validated as the create call validates it; a "
        "problem names the task (`tasks[3].assignedReviewer: ...`). The suite's `testMode` and each model "
        "override the task's own `testMode` and `agentModel`. At most 2,000 runs (422 `suite_too_large`).\n\n"
        "The runs share the key's concurrency limit with its other executions: what fits starts at once, the "
        "rest wait in the suite (durably, through restarts) and start as slots free up. A suite never answers "
        "429 for concurrency. `Idempotency-Key` works as for the create call.",
        "eval:create",
        201,
        "SuiteCreatedOut",
        "Created: the runs are planned and the first are queued. `Location` is the suite's record.",
        problems=(
            *_KEYED,
            *_BODY,
            "invalid_idempotency_key",
            "idempotency_key_in_use",
            "idempotency_key_reused",
            "suite_too_large",
        ),
        parameters=("IdempotencyKey",),
        body_schema="SuiteIn",
        body_examples={"both": {"summary": "Two models, with and without review", "value": _EXAMPLE_SUITE}},
        success_headers=("Location",),
        optional_headers=("Idempotent-Replayed",),
    ),
    Operation(
        "get",
        "/api/eval/suites",
        "listSuites",
        "Suites",
        "List your suites",
        "Your suites, newest first, with their progress; page with `limit` and `cursor`.",
        "eval:read",
        200,
        "SuiteListOut",
        "A page of suites.",
        problems=(*_KEYED, "invalid_cursor", "validation_failed"),
        parameters=("Limit", "Cursor"),
    ),
    Operation(
        "get",
        "/api/eval/suites/{suiteId}",
        "getSuite",
        "Suites",
        "A suite's progress and results",
        "Progress, and per model and test mode: runs, completed, the pass rate with its Wilson 95 % interval, the "
        "intervention rate (share of finished runs with a reject or an edit), revisions per run, review wait "
        "p50/p90, agent time p50, tokens and cost. Computed in the database on each request. The runs themselves "
        "are listed by `listSuiteRuns`.",
        "eval:read",
        200,
        "SuiteOut",
        "The suite's record.",
        problems=(*_KEYED, "not_found"),
        parameters=("SuiteId",),
    ),
    Operation(
        "get",
        "/api/eval/suites/{suiteId}/runs",
        "listSuiteRuns",
        "Suites",
        "List a suite's runs",
        "Every planned run in the suite's order (the order they start in): pending ones with `executionId` null, "
        "then each with its execution's status, verdict, rejects, edits and chat link. Page with `limit` (1 to "
        "500, default 100) and `cursor`.",
        "eval:read",
        200,
        "SuiteRunPageOut",
        "A page of runs.",
        problems=(*_KEYED, "not_found", "invalid_cursor", "validation_failed"),
        parameters=("SuiteId", "RunLimit", "Cursor"),
    ),
    Operation(
        "get",
        "/api/eval/suites/{suiteId}/export",
        "exportSuite",
        "Suites",
        "Export a suite's runs",
        "Every run of the suite, in the suite's order (runs not started yet too, with their status), as a file "
        "for the tools evaluators already use: JSON Lines, CSV, or an Inspect AI eval log. Each run carries its "
        "task, output and expected output, verdict and scores, metrics and every reviewer's decision. The body "
        "is sent as it is written; `Content-Disposition` names the file.",
        "eval:read",
        200,
        None,
        "The export: `application/jsonl`, `text/csv` or `application/zip` (an Inspect `.eval` log), as `format` "
        "asks.",
        problems=(*_KEYED, "not_found", "validation_failed"),
        parameters=("SuiteId", "ExportFormat"),
        success_headers=("Content-Disposition",),
        success_media="application/jsonl",
        more_media=("text/csv", "application/zip"),
    ),
    Operation(
        "post",
        "/api/eval/suites/{suiteId}/cancel",
        "cancelSuite",
        "Suites",
        "Cancel a suite",
        "Its pending runs never start; its queued, running and awaiting-review executions are cancelled as "
        "`cancelExecution` cancels one. A completed or cancelled suite is a 409 `suite_finished`.",
        "eval:manage",
        200,
        "SuiteOut",
        "Cancelled: the suite's record.",
        problems=(*_KEYED, "not_found", "suite_finished"),
        parameters=("SuiteId",),
    ),
)
