"""An event as it leaves the database: the event a transaction added, and its wire form (replayed or live)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from core.formatting import isoformat
from core.models import Event


@dataclass(frozen=True, slots=True)
class AddedEvent:
    """An event added in this transaction, as its row holds it. Plain values: an ORM `Event` costs more to make
    than the statement that inserted its row, on every agent step."""

    execution_id: str
    seq: int
    type: str
    payload: dict[str, Any]
    created_at: datetime


def event_message(event: Event | AddedEvent) -> dict[str, Any]:
    """The wire form of an event, the same from the database replay and from the bus."""
    return {
        "executionId": event.execution_id,
        "seq": event.seq,
        "type": event.type,
        "payload": event.payload,
        "at": isoformat(event.created_at),
    }


def news_of(event: AddedEvent) -> dict[str, Any]:
    """What an execution's channel says of a commit: its execution, and the seq of the last event it added."""
    return {"executionId": event.execution_id, "seq": event.seq}
