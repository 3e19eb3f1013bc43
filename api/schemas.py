"""Request bodies of the REST API, validated with clear, field-naming errors."""

from __future__ import annotations

import json
from typing import Annotated, Any, Literal, TypeVar
from urllib.parse import urlsplit

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    StrictInt,
    StringConstraints,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from agents.model_names import OFFLINE, ModelUnavailable, check_model_name
from api.problems import ApiError
from core.accounts import AccountError, normalise_email
from core.headers import line_break_problem
from core.model_profiles import EXTERNAL
from core.scorers import ScorerProblem, normalise_scorers

M = TypeVar("M", bound=BaseModel)
MAX_EXPECTED = 100_000
NonEmpty = Annotated[str, StringConstraints(strip_whitespace=True, min_length=1)]


class _Strict(BaseModel):
    # A misspelt field ("testmode") must be an error, not silently ignored.
    model_config = ConfigDict(extra="forbid", populate_by_name=False)

    @field_validator("*", mode="after")
    @classmethod
    def _storable_text(cls, value: Any) -> Any:
        # PostgreSQL text and jsonb cannot hold U+0000: refuse it here (422) rather than fail in the INSERT (500).
        if isinstance(value, str) and "\x00" in value:
            raise ValueError("must not contain the NUL character (U+0000)")
        return value


def _one_line(value: str) -> str:
    problem = line_break_problem(value)
    if problem is not None:
        raise ValueError(problem)
    return value


# A name that ends up in a mail header (the review mail's subject): one line, no control character (TAB
# included); core/headers.py says why. Descriptions and questions stay multi-line: they go into bodies.
SingleLine = Annotated[NonEmpty, StringConstraints(max_length=200), AfterValidator(_one_line)]


class CheckpointIn(_Strict):
    stage: SingleLine
    description: Annotated[str, StringConstraints(strip_whitespace=True, max_length=5000)] = ""
    verificationQuestion: Annotated[NonEmpty, StringConstraints(max_length=2000)]


def _reviewer_address(value: str | None) -> str | None:
    if value is None or not value.strip():
        return None
    try:
        return normalise_email(value)
    except AccountError:
        raise ValueError("must be a valid e-mail address") from None


def _webhook_url(value: str | None) -> str | None:
    if not value:
        return None
    problem = line_break_problem(value)
    if problem is not None:
        # urlsplit drops tabs and line breaks silently: the URL checked would not be the URL stored.
        raise ValueError(problem.replace("a single line", "one URL", 1))
    parts = urlsplit(value)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError("must be an http:// or https:// URL")
    return value


# One definition of each field rule, shared by create and PATCH so the two never drift apart.
ReviewerAddress = Annotated[str | None, AfterValidator(_reviewer_address)]
WebhookUrl = Annotated[
    Annotated[str, StringConstraints(strip_whitespace=True, max_length=2048)] | None, AfterValidator(_webhook_url)
]
WebhookEvent = Literal["checkpoint.awaiting_review", "checkpoint.decided"]


def _distinct_events(value: list[str] | None) -> list[str] | None:
    if value is None:
        return None
    if len(set(value)) != len(value):
        raise ValueError("must not name an event twice")
    return value


WebhookEvents = Annotated[list[WebhookEvent] | None, Field(max_length=2), AfterValidator(_distinct_events)]


def _runnable_model(name: str | None, info: ValidationInfo) -> str | None:
    if name:
        # The operator's profiles come with the request's validation context (parse_body's `context`); without
        # them, only `offline` and `provider:model` are names.
        context = info.context if isinstance(info.context, dict) else {}
        try:
            check_model_name(name, context.get(MODEL_PROFILES, ()))
        except ModelUnavailable as exc:
            raise ValueError(str(exc)) from None
    return name or None


MODEL_PROFILES = "modelProfiles"
AgentModelName = Annotated[str | None, StringConstraints(max_length=200), AfterValidator(_runnable_model)]
REVIEWER_REQUIRED = "assignedReviewer is required when testMode is with-verification and there are checkpoints"


def reviewer_required(test_mode: str, has_checkpoints: bool) -> bool:
    """Whether a human must be named: someone has to answer the checkpoints."""
    return test_mode == "with-verification" and has_checkpoints


class CreateTaskIn(_Strict):
    taskName: SingleLine
    taskDescription: Annotated[NonEmpty, StringConstraints(max_length=20000)]
    checkpoints: list[CheckpointIn] = Field(default_factory=list, max_length=50)
    autoDetectCheckpoints: StrictBool = False
    testMode: Literal["with-verification", "without-verification"] = "with-verification"
    assignedReviewer: ReviewerAddress = None
    webhookUrl: WebhookUrl = None
    # Issue 7: webhook events beyond the completion notification (which is always sent to webhookUrl).
    webhookEvents: WebhookEvents = None
    # Issue 6: this task's model instead of the service's default (VOUCH_AGENT_MODEL).
    agentModel: AgentModelName = None
    # Issue 5: rejections of one checkpoint the agent revises after; the next one ends the run `rejected`.
    maxRevisions: Annotated[StrictInt, Field(ge=0, le=10)] = 3
    backupReviewer: ReviewerAddress = None
    # Seconds from the moment a checkpoint starts waiting (per attempt); a plain number keeps clients simple.
    reviewDeadline: Annotated[StrictInt, Field(ge=1, le=30 * 24 * 3600)] | None = None
    onDeadline: Literal["reject", "approve", "cancel"] = "reject"
    # Issue 23: what the run should produce (any JSON value or text) and the scorers that judge its output.
    expected: Any = None
    scorers: list[Any] | None = None

    @model_validator(mode="after")
    def _reviewer_needed(self) -> CreateTaskIn:
        has_checkpoints = bool(self.checkpoints) or self.autoDetectCheckpoints
        if reviewer_required(self.testMode, has_checkpoints) and self.assignedReviewer is None:
            raise ValueError(REVIEWER_REQUIRED)
        return self

    @model_validator(mode="after")
    def _scorers(self, info: ValidationInfo) -> CreateTaskIn:
        if self.expected is not None:
            text = json.dumps(self.expected, ensure_ascii=True)
            if len(text) > MAX_EXPECTED:
                raise ScorerProblem("/expected", f"must be at most {MAX_EXPECTED} characters as JSON")
            if "\\u0000" in text:
                raise ScorerProblem("/expected", "must not contain the NUL character (U+0000)")
        if self.scorers is None:
            return self
        scorers = normalise_scorers(self.scorers, has_expected="expected" in self.model_fields_set)
        context = info.context if isinstance(info.context, dict) else {}
        for index, scorer in enumerate(scorers):
            if scorer["type"] == "human" and self.assignedReviewer is None:
                raise ScorerProblem("/assignedReviewer", "is required by the human scorer: someone grades the result")
            if scorer["type"] == "llm_judge" and scorer["model"] is not None:
                try:
                    check_model_name(scorer["model"], context.get(MODEL_PROFILES, ()))
                    if scorer["model"] in (OFFLINE, EXTERNAL):
                        raise ModelUnavailable(f"{scorer['model']!r} cannot judge: name a model profile")
                except ModelUnavailable as exc:
                    raise ScorerProblem(f"/scorers/{index}/model", str(exc)) from None
        self.scorers = scorers
        return self


class ExecutionPatchIn(_Strict):
    """PATCH of an unfinished execution: the fields that may change while it runs."""

    assignedReviewer: ReviewerAddress = None
    webhookUrl: WebhookUrl = None

    @model_validator(mode="after")
    def _something_to_change(self) -> ExecutionPatchIn:
        if not self.model_fields_set:
            raise ValueError("nothing to change: send assignedReviewer, webhookUrl or both")
        return self


class DecisionIn(_Strict):
    decision: Literal["approve", "reject"]
    comment: Annotated[str, StringConstraints(strip_whitespace=True, max_length=5000)] = ""
    # Checked by review.decide against the tool's argument schema (core/tool_args.py): 422 naming the argument.
    editedArgs: dict[str, Any] | None = None
    # Issue 23: an optional grade of what the reviewer saw, kept with the decision (checked by review.decide).
    rating: StrictInt | None = None
    labels: list[str] | None = None


class GradeIn(_Strict):
    """The `human` scorer's grade of a completed run."""

    passed: StrictBool
    rating: StrictInt | None = None
    labels: list[str] | None = None
    comment: Annotated[str, StringConstraints(strip_whitespace=True, max_length=5000)] = ""


def _pointer(loc: tuple[int | str, ...]) -> str:
    return "/" + "/".join(str(part) for part in loc) if loc else ""


def parse_body(model: type[M], payload: Any, context: dict[str, Any] | None = None) -> M:
    """Validate a JSON body into `model`, or raise a 422 naming every bad field.

    `context` carries what the rules need from the settings: `MODEL_PROFILES`, the profiles `agentModel` may name.
    """
    if not isinstance(payload, dict):
        raise ApiError(400, "invalid_body", "the request body must be a JSON object")
    try:
        return model.model_validate(payload, context=context)
    except ValidationError as exc:
        errors = []
        for error in exc.errors(include_url=False):
            pointer = _pointer(error["loc"])
            message = error["msg"].removeprefix("Value error, ")
            if error["type"] == "extra_forbidden":
                message = "unknown field"
            elif error["type"] == "missing":
                message = "is required"
            if not pointer and message == REVIEWER_REQUIRED:
                pointer = "/assignedReviewer"
            cause = (error.get("ctx") or {}).get("error")
            if isinstance(cause, ScorerProblem):
                pointer, message = cause.pointer, cause.detail
            errors.append({"pointer": pointer, "detail": message})
        first = errors[0]
        field = first["pointer"].lstrip("/").replace("/", ".") or "body"
        more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
        raise ApiError(422, "validation_failed", f"{field}: {first['detail']}{more}", errors=errors) from None


MAX_SUITE_RUNS = 2000


def _suite_model(name: str | None, info: ValidationInfo) -> str | None:
    if name == EXTERNAL:
        raise ValueError("a suite runs its tasks with built-in agents: 'external' cannot be one of its models")
    return _runnable_model(name, info)


def _distinct(values: list[str]) -> list[str]:
    if len(set(values)) != len(values):
        raise ValueError("must not name a model twice")
    return values


SuiteModel = Annotated[str, StringConstraints(min_length=1, max_length=200), AfterValidator(_suite_model)]


class SuiteIn(_Strict):
    """A suite (issue 23): every task body as the create takes it, run with each model, `repeats` times."""

    name: SingleLine
    # Validated one by one as the create validates them (api/suites.py), so that errors name the task's index.
    tasks: Annotated[list[Any], Field(min_length=1, max_length=500)]
    models: Annotated[list[SuiteModel], Field(min_length=1, max_length=20), AfterValidator(_distinct)]
    repeats: Annotated[StrictInt, Field(ge=1, le=20)] = 1
    testMode: Literal["with-verification", "without-verification", "both"] | None = None
