"""vouch_client is a distribution of its own that imports nothing of the server, so it keeps its own copy of the
wire-level facts (field names, status values, problem codes, the webhook signature). These tests hold that copy
to the server's, where a difference would make the client refuse or misread what the server accepts or sends."""

from __future__ import annotations

import ast
import json
import re
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any, get_args

import pytest
from pydantic import BaseModel
from vouch_client import calls, cli, models, suite_models
from vouch_client.errors import _BY_STATUS
from vouch_client.webhooks import sign as client_sign

from api import openapi_fields
from api import openapi_models as served
from api import openapi_suite_models as served_suites
from api.openapi_answers import PROBLEM_CODES
from api.schemas import CreateTaskIn, DecisionIn, ExecutionPatchIn, GradeIn, SuiteIn
from core.vocabulary import ENDING_EVENTS
from core.vocabulary import FINAL as FINAL_STATUSES
from core.webhook_secrets import sign as server_sign

ROOT = Path(__file__).resolve().parents[2]
CLIENT = ROOT / "vouch-client"
SERVER_PACKAGES = ("core", "api", "agents", "review", "chat")


@pytest.mark.parametrize(
    ("client", "server"),
    [
        (models.TaskSpec, CreateTaskIn),
        (models.ExecutionPatch, ExecutionPatchIn),
        (models.DecisionRequest, DecisionIn),
        (models.GradeRequest, GradeIn),
        (suite_models.SuiteSpec, SuiteIn),
    ],
)
def test_a_request_model_has_the_fields_the_server_accepts(client: type[BaseModel], server: type[BaseModel]) -> None:
    # The client's requests are strict (a misspelt field fails before it is sent): a field it lacks is one a
    # caller cannot send at all.
    assert set(client.model_fields) == set(server.model_fields)


@pytest.mark.parametrize(
    ("client", "server"),
    [
        (models.CreatedTask, served.CreateTaskOut),
        (models.StatusRecord, served.StatusRecordOut),
        (models.CheckpointState, served.CheckpointOut),
        (models.Decision, served.DecisionOut),
        (models.Attempt, served.AttemptOut),
        (models.NextAction, served.NextActionOut),
        (models.Metrics, served.MetricsOut),
        (models.ExecutionError, served.ExecutionErrorOut),
        (models.Agent, served.AgentOut),
        (models.Verdict, served.VerdictOut),
        (models.Score, served.ScoreOut),
        (models.ExecutionSummary, served.ExecutionSummaryOut),
        (models.ExecutionPage, served.ExecutionListOut),
        (models.DecisionAnswer, served.DecisionAnswerOut),
        (models.FieldError, served.ProblemFieldError),
        (models.Problem, served.Problem),
        (suite_models.CreatedSuite, served_suites.SuiteCreatedOut),
        (suite_models.SuiteProgress, served_suites.SuiteProgressOut),
        (suite_models.ModelResult, served_suites.SuiteModelResultOut),
        (suite_models.SuiteRun, served_suites.SuiteRunOut),
        (suite_models.Suite, served_suites.SuiteOut),
        (suite_models.SuiteSummary, served_suites.SuiteSummaryOut),
        (suite_models.SuitePage, served_suites.SuiteListOut),
        (suite_models.SuiteRunPage, served_suites.SuiteRunPageOut),
    ],
)
def test_an_answer_model_reads_only_fields_the_server_sends(client: type[BaseModel], server: type[BaseModel]) -> None:
    # Answers are read tolerantly (extra fields kept), so the server may send more; a field only the client
    # declares is one it waits for in vain. `replayed` comes from the Idempotent-Replayed header.
    assert set(client.model_fields) - {"replayed"} <= set(server.model_fields)


def _literal(model: type[BaseModel], name: str) -> set[Any]:
    annotation = model.model_fields[name].annotation
    values = {value for arg in get_args(annotation) or (annotation,) for value in get_args(arg) or (arg,)}
    return values - {None, type(None)}


def test_statuses_and_choices_match() -> None:
    assert models.FINAL_STATUSES == FINAL_STATUSES
    assert FINAL_STATUSES <= set(get_args(openapi_fields.ExecutionStatus))
    # The CLI's exit codes name every final status, and `waiting_checkpoint` looks for a status the server uses.
    assert set(cli.EXIT_CODES) == FINAL_STATUSES
    assert "awaiting_review" in get_args(openapi_fields.CheckpointStatus)
    assert set(models.OUTCOME_EVENTS) == ENDING_EVENTS
    assert all(event == f"execution.{status}" for event, status in models.OUTCOME_EVENTS.items())
    for field in ("testMode", "onDeadline"):
        assert _literal(models.TaskSpec, field) == _literal(CreateTaskIn, field), field
    assert _literal(models.DecisionRequest, "decision") == _literal(DecisionIn, "decision")


def test_the_problem_codes_the_client_branches_on_exist() -> None:
    assert PROBLEM_CODES[calls.KEY_IN_USE][0] == 409
    # Each 4xx the server answers has an exception class of its own, or is one of these plain ApiErrors.
    client_errors = {status for status, _ in PROBLEM_CODES.values() if status < 500}
    assert client_errors - set(_BY_STATUS) == {405, 413, 415}


def test_the_webhook_signature_is_the_servers() -> None:
    secret = "whsec_" + "MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY="
    body = json.dumps({"type": "execution.completed"}).encode()
    assert client_sign(body, "msg_1", 1_700_000_000, secret) == server_sign([secret], "msg_1", 1_700_000_000, body)


def test_the_server_installs_what_the_client_needs() -> None:
    # The root package ships vouch_client from vouch-client/ (pyproject's packages.find), so it must also
    # require everything the client's own distribution requires.
    def names(path: Path) -> set[str]:
        found = tomllib.loads(path.read_text())["project"]["dependencies"]
        return {re.split(r"[<>=!~ ;]", requirement, maxsplit=1)[0].lower() for requirement in found}

    assert names(CLIENT / "pyproject.toml") <= names(ROOT / "pyproject.toml")


def test_the_client_imports_nothing_of_the_server() -> None:
    for source in (CLIENT / "vouch_client").glob("*.py"):
        for node in ast.walk(ast.parse(source.read_text())):
            modules = [alias.name for alias in node.names] if isinstance(node, ast.Import) else []
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                modules.append(node.module)
            assert not {m.split(".")[0] for m in modules} & set(SERVER_PACKAGES), f"{source.name}: {modules}"
    # And, loaded as a whole, it pulls none in indirectly (Quart, SQLAlchemy, asyncpg among them).
    probe = (
        "import importlib, json, pkgutil, sys, vouch_client\n"
        "for m in pkgutil.iter_modules(vouch_client.__path__): importlib.import_module('vouch_client.' + m.name)\n"
        "print(json.dumps(sorted({name.split('.')[0] for name in sys.modules})))"
    )
    done = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    loaded = set(json.loads(done.stdout))
    assert not loaded & {*SERVER_PACKAGES, "quart", "sqlalchemy", "asyncpg", "alembic"}
