"""Queueing spans for export: an outbox row per unit of spans, written with the event that completes the unit.

A run spans pauses, processes and machines, so no span is held open in memory: the spans are built later from
the execution's stored events (core/trace_spans.py) and exported by a worker (core/trace_export.py). What this
module decides is when a unit is complete, in the transaction that completes it:

- `run`: the agent run with its model requests and tool calls, once the run reaches a final status;
- `review:<checkpoint>:<attempt>`: one review wait, once its decision lands (so a long run shows each decision
  as it happens, not only at the end).

Only when the process records traces (`Database(traces=True)`: OTEL_EXPORTER_OTLP_ENDPOINT set); otherwise no
row and no statement. `core.events` calls `queue_spans_for_event` inside the branch it already takes for
webhook events, so the agent's ordinary steps pay nothing for it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sqlalchemy.ext.asyncio import AsyncSession

from core.db import TRACES, publish_after_commit
from core.ids import new_id
from core.models import TraceExport, utcnow
from core.vocabulary import ENDING_EVENTS, EventType

TRACE_CHANNEL = "vouch:traces"
RUN_UNIT = "run"


def review_unit(checkpoint_id: str, attempt: int) -> str:
    return f"review:{checkpoint_id}:{attempt}"


def traces_on(session: AsyncSession) -> bool:
    return bool(session.info.get(TRACES))


def queue_spans_for_event(
    session: AsyncSession, execution_id: str, type_: str, payload: Mapping[str, Any]
) -> None:
    """Queue the export of the unit an event just added completes, if any, in the caller's transaction."""
    if not traces_on(session):
        return
    if type_ in ENDING_EVENTS:
        unit = RUN_UNIT
    elif type_ == EventType.CHECKPOINT_DECIDED:
        unit = review_unit(str(payload.get("checkpointId")), int(payload.get("attempt") or 1))
    else:
        return
    now = utcnow()
    row = TraceExport(
        id=new_id("trc"),
        execution_id=execution_id,
        unit=unit,
        status="pending",
        attempts=0,
        next_attempt_at=now,
        created_at=now,
    )
    session.add(row)
    publish_after_commit(session, TRACE_CHANNEL, {"id": row.id})
