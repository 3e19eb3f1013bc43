"""Response bodies of the REST API, as pydantic models: the source of their schemas in the OpenAPI document.

The views build plain dicts (api/status.py, api/tasks.py, api/executions.py, api/decisions.py); these models only
describe them. The contract test (tests/api/test_openapi_contract.py) checks every live answer against the
schemas generated from here, so a field added to a view without being added here fails that test.

Every model is closed (`extra="forbid"` → `additionalProperties: false`) for the same reason. A field that
may be null is typed `X | None` without a default: always present, possibly null (`anyOf [X, null]`).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from api.openapi_external_models import ExternalCheckpointOut, ExternalCompleteOut, ExternalEventsOut
from api.openapi_fields import (
    Channel,
    ChatUrl,
    CheckpointCount,
    CheckpointId,
    CheckpointStatus,
    CompletedAt,
    CreatedAt,
    ExecutionId,
    Mode,
    Out,
    Reviewer,
    Status,
    Succeeded,
    TaskName,
)
from api.openapi_suite_models import SUITE_RESPONSE_MODELS
from api.openapi_webhook_models import RedeliveryOut, WebhookLogOut
from core.errors import FailureCode


class CreateTaskOut(Out):
    """The answer to a create (spec §2.3)."""

    success: Succeeded
    executionId: ExecutionId
    chatUrl: ChatUrl
    checkpointCount: CheckpointCount


class DecisionOut(Out):
    """A recorded decision on a checkpoint."""

    decision: Literal["approve", "reject", "cancel"] = Field(
        description="What was decided; `cancel` only by a deadline whose onDeadline is cancel."
    )
    by: str = Field(description="Who decided: the reviewer's e-mail address, or `vouch` for an automatic pass.")
    via: Channel = Field(description="Channel of the decision; `auto` when without-verification passed it.")
    at: datetime = Field(description="When it was decided (UTC, ISO 8601 with milliseconds).")
    comment: str | None = Field(description="The reviewer's comment; empty when none was given.")
    attempt: int = Field(ge=1, description="The attempt of the checkpoint this decision answered.")
    originalArgs: dict[str, Any] | None = Field(
        description="With `editedArgs`: every argument the agent proposed; null for a decision without edits."
    )
    editedArgs: dict[str, Any] | None = Field(
        description="The arguments the reviewer changed before approving (the tool ran with them, the others as "
        "proposed); null when none were."
    )
    rating: int | None = Field(ge=1, le=5, description="The reviewer's optional 1-5 rating; null when none was given.")
    labels: list[str] | None = Field(description="The reviewer's optional labels; null when none were given.")


class AttemptOut(DecisionOut):
    """One decided attempt of a checkpoint, with the address the decision came from."""

    remoteAddr: str | None = Field(description="The deciding request's address; null for timers and automatic passes.")


class NextActionOut(Out):
    """The exact action the agent proposed at a checkpoint."""

    tool: str = Field(description="The tool the agent will call (`finish`, `request_review` for the run's own steps).")
    args: dict[str, Any] = Field(description="Every argument of the call, in full.")
    editable: bool = Field(description="Whether an approval may change the arguments (`editedArgs`).")


class CheckpointOut(Out):
    """One checkpoint of an execution and where it stands."""

    checkpointId: CheckpointId
    stage: str = Field(description="Short label of the stage being verified.")
    description: str = Field(description="What happens at this stage.")
    verificationQuestion: str = Field(description="The question the reviewer answers.")
    origin: Literal["caller", "auto", "agent", "grade"] = Field(
        description="`caller`: given at creation; `auto`: added by Vouch; `agent`: asked by an external agent; "
        "`grade`: the `human` scorer's \"Grade the result\", asked once the run has completed (approve = pass, "
        "reject = fail)."
    )
    status: CheckpointStatus = Field(description="`awaiting_review` while the agent waits at it for the reviewer.")
    awaitingSince: datetime | None = Field(description="When the agent reached it and began to wait; null before.")
    nextAction: NextActionOut | None = Field(
        description="The action the agent proposed when it last paused here: what approving lets happen. Kept "
        "once decided, for the record. Null until the agent has paused here."
    )
    decision: DecisionOut | None = Field(description="The decision on the current attempt, once there is one.")
    attempt: int = Field(ge=1, description="The current attempt: 1, plus one per rejection the agent revised after.")
    attempts: list[AttemptOut] = Field(description="Every decided attempt, oldest first.")


class ReviewLatencyOut(Out):
    """How long one attempt of one checkpoint waited for its decision."""

    checkpointId: CheckpointId
    attempt: int = Field(ge=1, description="The attempt of the checkpoint.")
    ms: int = Field(ge=0, description="Milliseconds from the pause to the decision (so far, while it waits).")


class MetricsOut(Out):
    """Performance metrics of an execution, computed from its stored events (the same from any process);
    they grow while it runs (open intervals run to now)."""

    durationMs: int | None = Field(description="From creation to completion (or to now while it runs).")
    agentMs: int = Field(
        ge=0, description="Time the agent worked: the sum of its model requests' and tool calls' durations."
    )
    reviewWaitMs: int = Field(
        ge=0, description="Time spent waiting for reviewers, over every attempt of every checkpoint."
    )
    timeToFirstEventMs: int | None = Field(
        description="From creation to the agent's first message, tool call or model request; null before."
    )
    steps: int = Field(ge=0, description="Tool steps the agent finished (failed ones included).")
    modelRequests: int = Field(ge=0, description="Requests made to the language model (0 for the offline agent).")
    inputTokens: int = Field(ge=0, description="Input tokens over all model requests.")
    outputTokens: int = Field(ge=0, description="Output tokens over all model requests.")
    toolCalls: int = Field(ge=0, description="Tool calls the agent started.")
    toolCallsByTool: dict[str, int] = Field(description="Tool calls started, per tool name.")
    checkpointsApproved: int = Field(ge=0, description="Approve decisions, automatic passes included.")
    checkpointsRejected: int = Field(ge=0, description="Reject decisions: one per rejected attempt.")
    revisions: int = Field(ge=0, description="Rejections the agent went back to revise after.")
    reviewLatencyMs: list[ReviewLatencyOut] = Field(
        description="Each waited checkpoint attempt, in the order the waits began; their sum is `reviewWaitMs`."
    )
    costUsd: float | None = Field(
        description="Price of the model requests in US dollars; null when any request's price is unknown "
        "or when no request was made."
    )


class ModelProfileOut(Out):
    """One of the operator's model profiles: a name a task may give as `agentModel`."""

    name: str = Field(description="The profile's name: give it as `agentModel`.")
    provider: Literal["openai", "anthropic"] = Field(
        description="The wire format it is reached by: `openai` (any OpenAI-compatible server) or `anthropic`."
    )
    model: str = Field(description="The provider's name for the model.")
    temperature: float | None = Field(description="Sampling temperature sent with each request; null: the model's.")
    maxTokens: int | None = Field(description="Output tokens one request may produce; null: the provider's default.")
    inputUsdPerMtok: float | None = Field(
        description="US dollars per million input tokens, which `metrics.costUsd` is computed from; null: the "
        "public price list's, when it knows the model."
    )
    outputUsdPerMtok: float | None = Field(description="US dollars per million output tokens; null as above.")


class ModelChoicesOut(Out):
    """The models a task may name in `agentModel`."""

    default: str = Field(description="What a task without `agentModel` runs with (VOUCH_AGENT_MODEL).")
    profiles: list[ModelProfileOut] = Field(description="The operator's model profiles, in the file's order.")
    otherChoices: list[str] = Field(
        description="The other accepted forms: `offline` (the deterministic agent) and `openai:<model>` / "
        "`anthropic:<model>` (any model of that provider, with the service-wide settings)."
    )


class ExecutionErrorOut(Out):
    """Why an execution failed: a stable `code`, a sentence, and the code's own fields."""

    code: FailureCode = Field(
        description="Stable: `task_not_understood` (the rule-based agent cannot carry out `instructions`; nothing "
        "was done), `step_budget_exhausted`, `time_budget_exhausted`, `token_budget_exhausted`, "
        "`model_unavailable` (provider down after retries, or not configured), `provider_failed` (the provider "
        "refused the request), `model_refused` (the model declined or answered nothing usable), `tool_failed`, "
        "`internal_error`; `unclassified` for failures recorded before codes existed."
    )
    detail: str = Field(description="What happened, in one sentence for a human.")
    instructions: list[str] = Field(
        default=[],
        description="`task_not_understood` only (absent otherwise): the task's instructions the agent cannot carry "
        "out, as written.",
    )


class AgentOut(Out):
    """The agent that runs the execution, named for what it is."""

    model: str = Field(description="`agentModel`: `offline`, or the model it asks (`openai:<model>`, …).")
    kind: Literal["rule-based", "model", "external"] = Field(
        description="`rule-based`: the built-in offline agent, which follows a fixed vocabulary and fails a task "
        "it does not understand; `model`: a language model chooses the steps; `external`: the caller's own agent "
        "drives it over REST (`agentModel: external`)."
    )


class ScoreOut(Out):
    """One scorer's judgement of the run's `result.output`."""

    scorer: str = Field(description="The scorer's `name` (its type unless the task named it).")
    type: Literal["exact", "includes", "regex", "json_schema", "llm_judge", "human"] = Field(
        description="The scorer's type."
    )
    passed: bool | None = Field(
        description="Whether the output passed; null when the scorer could not say (a judge model unavailable, no "
        "grade before the grading deadline): never counted as a pass."
    )
    score: float | None = Field(ge=0, le=1, description="0 to 1; null when the scorer could not say.")
    explanation: str = Field(description="Why: what matched or differed, the judge's reasoning, the grader's comment.")
    by: str = Field(
        description="`vouch` for the service's own checks, the judge's model name, or the grader's address."
    )


class VerdictOut(Out):
    """Whether the run got it right, separate from `status` (a completed run can fail its evaluation)."""

    state: Literal["pending", "grading", "done"] = Field(
        description="`pending` until the run has ended and been scored, `grading` while the `human` scorer's grade "
        "waits, `done` once recorded."
    )
    passed: bool | None = Field(
        description="false when any scorer failed; null when any could not say (or before `done`); else true. A run "
        "that did not complete fails every scorer."
    )
    score: float | None = Field(ge=0, le=1, description="The mean of the scores given; null when none was.")
    scores: list[ScoreOut] = Field(description="Each scorer's judgement, in the task's order (so far).")


class StatusRecordOut(Out):
    """The status record of an execution (spec §4.2): status, checkpoints and metrics."""

    success: Succeeded
    executionId: ExecutionId
    taskName: TaskName
    status: Status
    testMode: Mode
    assignedReviewer: Reviewer
    agentModel: str = Field(description="The agent's model: `offline`, `openai:<model>` or `anthropic:<model>`.")
    agent: AgentOut = Field(description="The agent: its model and whether it is rule-based or model-driven.")
    autoDetectCheckpoints: bool = Field(description="Whether the service adds and enforces checkpoints itself.")
    chatUrl: ChatUrl
    createdAt: CreatedAt
    startedAt: datetime | None = Field(description="When a worker first began it; null before.")
    completedAt: CompletedAt
    checkpointCount: CheckpointCount
    checkpoints: list[CheckpointOut] = Field(description="Its checkpoints, in the order the agent passes them.")
    result: dict[str, Any] | None = Field(
        description="The agent's result once completed: `output` (its final answer, what scorers judge: the model's "
        "`finish` text, the rule-based agent's summary, an external agent's `output`), `summary`, `steps`, …."
    )
    error: ExecutionErrorOut | None = Field(description="Why it failed, when it failed; null otherwise.")
    metrics: MetricsOut = Field(description="Performance metrics, so far.")
    webhook: WebhookLogOut = Field(description="The webhook URL and each delivery with its attempts.")
    expected: Any = Field(description="The task's `expected` output, as given; null when none was.")
    scorers: list[dict[str, Any]] | None = Field(
        description="The task's scorers, each as an object `{type, name, ...options}`; null when none were given."
    )
    verdict: VerdictOut | None = Field(description="The evaluation's verdict; null for a task without scorers.")


class ExecutionSummaryOut(Out):
    """One execution in a list."""

    executionId: ExecutionId
    taskName: TaskName
    status: Status
    testMode: Mode
    assignedReviewer: Reviewer
    createdAt: CreatedAt
    completedAt: CompletedAt
    checkpointCount: CheckpointCount
    chatUrl: ChatUrl


class ExecutionListOut(Out):
    """A page of the caller's executions, newest first."""

    success: Succeeded
    items: list[ExecutionSummaryOut] = Field(description="This page's executions, newest first.")
    nextCursor: str | None = Field(description="Pass it back as `cursor` for the next page; null on the last page.")


class DecisionAnswerOut(Out):
    """The answer to a decision: the decision as recorded."""

    success: Succeeded
    executionId: ExecutionId
    checkpointId: CheckpointId
    decision: DecisionOut = Field(description="The decision as recorded.")


class ProblemFieldError(Out):
    """One invalid input, named by exactly one of `pointer`, `parameter` or `header`."""

    model_config = ConfigDict(extra="forbid", json_schema_extra={"minProperties": 2, "maxProperties": 2})

    pointer: str = Field(default="", description="JSON Pointer (RFC 6901) into the body; empty for the whole body.")
    parameter: str = Field(default="", description="Name of the query parameter.")
    header: str = Field(default="", description="Name of the request header.")
    detail: str = Field(description="What is wrong with it.")


class Problem(Out):
    """An error answer: RFC 9457 problem details, plus a stable `code` and `success: false`."""

    success: Literal[False] = Field(description="Always `false` in an error answer.")
    type: str = Field(description="A URI naming the kind of problem; it ends with the `code`.")
    title: str = Field(description="Short, human-readable summary of the status.")
    status: int = Field(ge=400, le=599, description="The HTTP status code, repeated.")
    detail: str = Field(description="What went wrong in this request, for a human.")
    code: str = Field(description="Stable machine-readable name of the problem; branch on this.")
    errors: list[ProblemFieldError] = Field(default=[], description="Each invalid input, when there are any.")


RESPONSE_MODELS: tuple[type[BaseModel], ...] = (
    ExternalEventsOut,
    ExternalCheckpointOut,
    ExternalCompleteOut,
    CreateTaskOut,
    StatusRecordOut,
    ExecutionListOut,
    DecisionAnswerOut,
    RedeliveryOut,
    ModelChoicesOut,
    *SUITE_RESPONSE_MODELS,
    Problem,
)
