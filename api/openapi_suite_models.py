"""The answers of the suite routes (api/suites.py), as pydantic models: the source of their OpenAPI schemas.

Closed like every answer model (api/openapi_models.py): a field added to a view and not here fails the contract
test. Definitions of the numbers: core/suite_summary.py.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Literal

from pydantic import BaseModel, Field

from api.openapi_fields import Out as _Out
from api.openapi_fields import Succeeded

SuiteStatus = Literal["running", "completed", "cancelled"]
RunMode = Literal["with-verification", "without-verification"]
Rate = Annotated[float | None, Field(ge=0, le=1)]


SuiteId = Annotated[str, Field(description="The suite's id; use it in the suite paths.")]


class SuiteCreatedOut(_Out):
    """The answer to a suite's create."""

    success: Succeeded
    suiteId: SuiteId
    name: str = Field(description="`name` as given.")
    status: Literal["running"] = Field(description="Always `running` at creation.")
    runs: int = Field(ge=1, description="How many runs it plans: tasks x models x repeats (x 2 for `both`).")
    url: str = Field(description="The suite's page in the browser (for its owner, signed in).")
    createdAt: datetime = Field(description="When it was created (UTC).")


class SuiteProgressOut(_Out):
    """How far the runs are: `total` = pending + active + finished + cancelled."""

    total: int = Field(ge=0, description="Runs planned.")
    pending: int = Field(ge=0, description="Waiting for a free slot of the key's concurrency limit.")
    active: int = Field(ge=0, description="Started and not finished (queued, running, awaiting review, scoring).")
    finished: int = Field(ge=0, description="Reached a final status, with its verdict recorded if it has scorers.")
    cancelled: int = Field(ge=0, description="Never started: the suite was cancelled first.")


class PercentilesOut(_Out):
    p50: float = Field(description="The median, in milliseconds.")
    p90: float = Field(description="The 90th percentile, in milliseconds.")


class MedianOut(_Out):
    p50: float = Field(description="The median, in milliseconds.")


class SuiteModelResultOut(_Out):
    """The results of one model in one test mode."""

    model: str = Field(description="The `agentModel` the runs used.")
    testMode: RunMode = Field(description="The mode the runs used.")
    runs: int = Field(ge=0, description="Runs planned for this model and mode.")
    finished: int = Field(ge=0, description="Of them, finished (see progress).")
    completed: int = Field(ge=0, description="Of them, executions that ended `completed`.")
    failed: int = Field(ge=0, description="Of them, executions that ended `failed`.")
    passed: int = Field(ge=0, description="Runs whose recorded verdict passed.")
    scored: int = Field(ge=0, description="Runs whose recorded verdict passed or failed.")
    passRate: Rate = Field(description="passed / scored; null before any run is scored.")
    passRateInterval: list[float] | None = Field(
        description="The Wilson score 95 % interval of `passRate`, `[low, high]`; null before any run is scored."
    )
    interventionRate: Rate = Field(
        description="Share of finished runs with a reject or an edited approval at a checkpoint (the `human` "
        "scorer's grade is not counted); null before any run finished."
    )
    revisionsPerRun: float | None = Field(
        description="Revisions the agents made after a rejection, per finished run; null before any finished."
    )
    reviewWaitMs: PercentilesOut | None = Field(
        description="Review waits of the finished runs (each waited attempt of a checkpoint, pause to decision, as "
        "`metrics.reviewLatencyMs`); null when none waited."
    )
    agentTimeMs: MedianOut | None = Field(
        description="The finished runs' agent time (`metrics.agentMs`); null before any run finished."
    )
    inputTokens: int = Field(ge=0, description="Model input tokens of every started run.")
    outputTokens: int = Field(ge=0, description="Model output tokens of every started run.")
    costUsd: float | None = Field(
        description="The model requests' total price in USD; null when any request's price is unknown, or there "
        "was no request (the offline agent)."
    )


class SuiteRunOut(_Out):
    """One planned run, in the order runs start."""

    executionId: str | None = Field(description="Its execution; null until it starts (or never: cancelled).")
    taskIndex: int = Field(ge=0, description="The task's index in the suite's `tasks`.")
    taskName: str = Field(description="The task's `taskName`.")
    model: str = Field(description="The `agentModel` it runs with.")
    testMode: RunMode = Field(description="The mode it runs in.")
    repeat: int = Field(ge=1, description="Which repetition, from 1.")
    status: str = Field(
        description="`pending` or `cancelled` before it starts, then its execution's status (`deleted` when the "
        "execution was deleted)."
    )
    passed: bool | None = Field(description="The recorded verdict's pass or fail; null before it is recorded.")
    score: float | None = Field(description="The recorded verdict's score (0..1); null before, or none.")
    rejects: int = Field(ge=0, description="Reject decisions at its checkpoints.")
    edits: int = Field(ge=0, description="Approvals that edited the proposed arguments.")
    chatUrl: str | None = Field(description="Its live chat view (carries a token); null before it starts.")


class SuiteOut(_Out):
    """A suite's record: progress and results per model and mode. Its runs are listed by `listSuiteRuns`."""

    success: Succeeded
    suiteId: SuiteId
    name: str = Field(description="`name` as given.")
    status: SuiteStatus = Field(description="`completed` once every run finished; `cancelled` once cancelled.")
    createdAt: datetime = Field(description="When it was created (UTC).")
    finishedAt: datetime | None = Field(description="When it completed or was cancelled; null while running.")
    testMode: Literal["with-verification", "without-verification", "both"] | None = Field(
        description="The suite's `testMode`; null when each task kept its own."
    )
    repeats: int = Field(ge=1, description="`repeats` as given.")
    models: list[str] = Field(description="The models, as given.")
    progress: SuiteProgressOut = Field(description="How far its runs are.")
    byModel: list[SuiteModelResultOut] = Field(description="One entry per model and test mode, in the given order.")


class SuiteRunPageOut(_Out):
    """A page of a suite's runs, in the suite's order."""

    success: Succeeded
    suiteId: SuiteId
    runs: list[SuiteRunOut] = Field(description="This page's runs, in the order runs start.")
    nextCursor: str | None = Field(description="Pass it back as `cursor` for the next page; null on the last page.")


class SuiteSummaryOut(_Out):
    """One suite in a list."""

    suiteId: SuiteId
    name: str = Field(description="`name` as given.")
    status: SuiteStatus = Field(description="`running`, `completed` or `cancelled`.")
    createdAt: datetime = Field(description="When it was created (UTC).")
    progress: SuiteProgressOut = Field(description="How far its runs are.")


class SuiteListOut(_Out):
    """A page of the caller's suites, newest first."""

    success: Succeeded
    suites: list[SuiteSummaryOut] = Field(description="This page's suites, newest first.")
    nextCursor: str | None = Field(description="Pass it back as `cursor` for the next page; null on the last page.")


SUITE_RESPONSE_MODELS: tuple[type[BaseModel], ...] = (SuiteCreatedOut, SuiteOut, SuiteRunPageOut, SuiteListOut)
