"""A reviewer's grade of a finished run (issue 23): the `human` scorer's answer, recorded as the run's verdict.

The grade is asked as a checkpoint of origin `grade` (review/grade_request.py) and answered through
`review.decide` like any checkpoint, on every channel; `decide` hands the decision here, in its transaction.
Approve is a pass and reject a fail; a 1-5 rating gives the score ((rating - 1) / 4), else 1 or 0. The
deadline's answer (`via: timeout`) is no grade: `passed` null, never a pass.
"""

from __future__ import annotations

from typing import Any, Protocol

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncSession

from core.models import Execution
from core.scorers import score
from core.verdicts import record_verdict
from core.vocabulary import Channel, VerdictState


class DecisionRecord(Protocol):
    """What a grade reads of the decision (review/decisions.py's record, which calls here)."""

    @property
    def decision(self) -> str: ...
    @property
    def by(self) -> str: ...
    @property
    def via(self) -> str: ...
    @property
    def comment(self) -> str: ...
    @property
    def rating(self) -> int | None: ...
    @property
    def labels(self) -> list[str] | None: ...


GRADE_STAGE = "Grade the result"
GRADE_QUESTION = "Did the agent get it right? Grade the result: pass or fail, with an optional 1-5 rating."


def human_score(scorer: dict[str, Any], record: DecisionRecord) -> dict[str, Any]:
    if record.via == Channel.TIMEOUT or record.decision not in ("approve", "reject"):
        entry = score(scorer, None, None, "no grade before the grading deadline", record.by)
    else:
        passed = record.decision == "approve"
        value = (record.rating - 1) / 4 if record.rating is not None else (1.0 if passed else 0.0)
        explanation = record.comment or ("graded a pass" if passed else "graded a fail")
        entry = score(scorer, passed, value, explanation, record.by)
    entry.update(rating=record.rating, labels=record.labels, comment=record.comment, via=record.via)
    return entry


async def grade_given(session: AsyncSession, execution_id: str, record: DecisionRecord) -> None:
    """Record the run's verdict with the grade in place of the human scorer's pending entry."""
    row = (
        await session.execute(
            sa.select(Execution.scorers, Execution.verdict_scores).where(Execution.id == execution_id)
        )
    ).one()
    kept = {s.get("scorer"): s for s in row.verdict_scores or ()}
    # In the order the task named its scorers, the grade where `human` stands.
    scores = [human_score(s, record) if s.get("type") == "human" else kept[s["name"]] for s in row.scorers or ()]
    await record_verdict(session, execution_id, scores, from_state=VerdictState.GRADING)
