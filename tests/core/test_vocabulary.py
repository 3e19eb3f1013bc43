"""The vocabulary is complete and consistent: every event type has a payload, statuses split into active and final."""

from __future__ import annotations

import json
from typing import get_type_hints

from core.event_payloads import PAYLOADS
from core.vocabulary import ACTIVE, CHANNELS, EXECUTION_STATUSES, FINAL, PERSON_CHANNELS, EventType, ExecutionStatus


def test_every_event_type_has_a_payload() -> None:
    assert set(PAYLOADS) == set(EventType)
    for payload in PAYLOADS.values():
        assert get_type_hints(payload), payload


def test_statuses_split_into_active_and_final() -> None:
    assert set(ACTIVE) | FINAL == set(ExecutionStatus) == set(EXECUTION_STATUSES)
    assert not set(ACTIVE) & FINAL
    assert ACTIVE == (ExecutionStatus.QUEUED, ExecutionStatus.RUNNING, ExecutionStatus.AWAITING_REVIEW)
    assert PERSON_CHANNELS < set(CHANNELS)


def test_members_are_their_strings() -> None:
    # Rows and JSON keep plain strings: a member written anywhere reads back equal to it.
    stored: str = json.loads(json.dumps({"type": EventType.CHECKPOINT_DECIDED}))["type"]
    assert stored == EventType.CHECKPOINT_DECIDED and stored == "checkpoint.decided"
    assert f"{ExecutionStatus.AWAITING_REVIEW}" == "awaiting_review"
