"""Suites (POST /api/eval/suites and its routes): the same tasks run across models, repeats and test modes.

Requests are strict and answers tolerant, as in models.py: a misspelt suite field is an error here, and a field the
server adds later is kept (`model_extra`).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from vouch_client.models import TaskSpec

SUITE_FINAL_STATUSES = frozenset({"completed", "cancelled"})


class _Answer(BaseModel):
    model_config = ConfigDict(extra="allow")


class SuiteSpec(BaseModel):
    """The POST /api/eval/suites body. Each task is a create body; the suite's models and testMode override the
    task's own `agentModel` and `testMode`."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1, max_length=200)
    tasks: list[TaskSpec] = Field(min_length=1, max_length=500)
    models: list[str] = Field(min_length=1, max_length=20)
    repeats: int = Field(default=1, ge=1, le=20)
    testMode: Literal["with-verification", "without-verification", "both"] | None = None

    def body(self) -> dict[str, Any]:
        body: dict[str, Any] = self.model_dump(mode="json", exclude_unset=True, exclude={"tasks"})
        # Each task as its own create body: only what the file set, so the server's defaults stay the server's.
        body["tasks"] = [task.body() for task in self.tasks]
        return body


class CreatedSuite(_Answer):
    suiteId: str
    name: str
    status: str
    runs: int
    url: str
    createdAt: datetime


class SuiteProgress(_Answer):
    total: int = 0
    pending: int = 0
    active: int = 0
    finished: int = 0
    cancelled: int = 0


class Percentiles(_Answer):
    p50: float | None = None
    p90: float | None = None


class ModelResult(_Answer):
    """One model in one test mode: its runs, verdicts (`passRate` over `scored` runs, with a Wilson 95 %
    interval), how often a human stepped in, review waits, agent time, tokens and cost."""

    model: str
    testMode: str
    runs: int = 0
    finished: int = 0
    completed: int = 0
    failed: int = 0
    passed: int = 0
    scored: int = 0
    passRate: float | None = None
    passRateInterval: list[float] | None = None
    interventionRate: float | None = None
    revisionsPerRun: float | None = None
    reviewWaitMs: Percentiles | None = None
    agentTimeMs: Percentiles | None = None
    inputTokens: int = 0
    outputTokens: int = 0
    costUsd: float | None = None

    @property
    def label(self) -> str:
        return f"{self.model} ({self.testMode})"


class SuiteRun(_Answer):
    """One run of the suite; a run not started yet has no executionId and status "pending"."""

    executionId: str | None = None
    taskIndex: int
    taskName: str
    model: str
    testMode: str
    repeat: int = 0
    status: str
    passed: bool | None = None
    score: float | None = None
    rejects: int = 0
    edits: int = 0
    chatUrl: str | None = None


class Suite(_Answer):
    """GET /api/eval/suites/<id>: progress and per model results (the runs: `suite_runs`)."""

    suiteId: str
    name: str
    status: str
    createdAt: datetime
    finishedAt: datetime | None = None
    testMode: str | None = None
    repeats: int = 1
    models: list[str] = Field(default_factory=list)
    progress: SuiteProgress = Field(default_factory=SuiteProgress)
    byModel: list[ModelResult] = Field(default_factory=list)

    @property
    def final(self) -> bool:
        return self.status in SUITE_FINAL_STATUSES


class SuiteRunPage(_Answer):
    """One page of GET /api/eval/suites/<id>/runs, in the suite's order; pass `nextCursor` back for the next."""

    suiteId: str
    runs: list[SuiteRun]
    nextCursor: str | None = None


class SuiteSummary(_Answer):
    suiteId: str
    name: str
    status: str
    createdAt: datetime
    progress: SuiteProgress = Field(default_factory=SuiteProgress)


class SuitePage(_Answer):
    """One page of GET /api/eval/suites, newest first; pass `nextCursor` back for the next."""

    suites: list[SuiteSummary]
    nextCursor: str | None = None
