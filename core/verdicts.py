"""Recording a run's verdict (issue 23): once, in the transaction that has the last score.

The verdict lives in columns of the execution (`verdict_state`, `verdict_passed`, `verdict_score`,
`verdict_scores`, `verdict_at`) so that a suite counts passes in SQL. Writing it is a compare-and-set on
`verdict_state` (pending, or grading while a reviewer's grade waits): of two workers that scored the same run,
one records; the other's transaction finds nothing to set and leaves it. The `execution.scored` event it
appends is what sends the completion webhook (core/webhooks.py), which a run with scorers holds back until
then, so the webhook carries the verdict.
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncSession

from core.events import append_event
from core.models import Execution, utcnow
from core.scorers import combine
from core.vocabulary import EventType, VerdictState


async def record_verdict(
    session: AsyncSession, execution_id: str, scores: list[dict[str, Any]], *, from_state: VerdictState
) -> bool:
    """Record the verdict of `scores` if the execution's verdict is still `from_state`; False when another
    has recorded it (or the state moved on), and nothing is written."""
    passed, value = combine(scores)
    done = await session.execute(
        sa.update(Execution)
        .where(Execution.id == execution_id, Execution.verdict_state == from_state)
        .values(
            verdict_state=VerdictState.DONE,
            verdict_passed=passed,
            verdict_score=value,
            verdict_scores=scores,
            verdict_at=utcnow(),
            verdict_lease_until=None,
        ),
        execution_options={"synchronize_session": False},
    )
    if done.rowcount != 1:  # type: ignore[attr-defined]
        return False
    await append_event(
        session, execution_id, EventType.EXECUTION_SCORED, {"passed": passed, "score": value, "scores": scores}
    )
    return True
