"""A cached status record (api/status_cache.py) reads, byte for byte, as the record encoded afresh at the same
moment: the body is spliced from pieces encoded once and the metrics' clock fields computed per request."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from quart import Quart

from api.app import create_app
from api.status_cache import CachedStatus
from core.metrics import FactEvent, RunFacts, metrics_of
from core.models import Checkpoint, Decision, Execution
from core.settings import Settings

T0 = datetime(2026, 11, 24, 12, 0, 0, tzinfo=UTC)
CHAT_URL = 'https://vouch.example/chat/exe_1?token=a"b<c>'


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def facts_of(status: str, completed_at: datetime | None, now: datetime) -> RunFacts:
    """An execution whose checkpoint was rejected once (a decided wait), revised, and now waits again (an open
    wait), with steps, a model request and a revision: every field of the metrics has something to count."""
    execution = Execution(id="exe_1", status=status, created_at=T0, completed_at=completed_at)
    checkpoint = Checkpoint(id="chk_1", status="awaiting_review", attempt=2, awaiting_since=at(9.5))
    rejected = Decision(checkpoint_id="chk_1", attempt=1, decision="reject", via="web", decided_at=at(4.25))

    def event(seq: int, type_: str, seconds: float, **payload: Any) -> FactEvent:
        return FactEvent(seq, type_, payload, at(seconds))

    events = [
        event(1, "execution.started", 0.01),
        event(2, "tool.call", 0.5, tool="write_file"),
        event(3, "tool.result", 0.6, durationMs=12.4),
        event(4, "model.request", 0.7, durationMs=250, inputTokens=40, outputTokens=9, costUsd=0.0012),
        event(5, "checkpoint.awaiting_review", 1.0, checkpointId="chk_1", attempt=1),
        event(6, "checkpoint.revision_requested", 4.3, checkpointId="chk_1"),
        event(7, "tool.call", 5.0, tool="http_get"),
        event(8, "tool.result", 5.2, durationMs=3),
        event(9, "checkpoint.awaiting_review", 9.5, checkpointId="chk_1", attempt=2),
    ]
    return RunFacts(execution, events, [checkpoint], [rejected], at(0.5), now)


def fresh_body(app: Quart, record: dict[str, Any], facts: RunFacts) -> str:
    """What Quart's JSON response of the whole record, computed now, would hold."""
    whole = {**record, "chatUrl": CHAT_URL, "metrics": metrics_of(facts)}
    if app.json.compact is False:  # type: ignore[attr-defined]
        return str(app.json.dumps(whole, indent=2)) + "\n"
    return str(app.json.dumps(whole, separators=(",", ":"))) + "\n"


RECORD = {"executionId": "exe_1", "status": "awaiting_review", "checkpoints": [{"id": "chk_1", "attempt": 2}]}


@pytest.fixture
def app(settings: Settings) -> Quart:
    return create_app(settings)


@pytest.mark.parametrize("compact", [True, False], ids=["compact", "pretty"])
async def test_an_unfinished_executions_cached_body_moves_with_the_clock_as_a_fresh_one(
    app: Quart, compact: bool
) -> None:
    app.json.compact = None if compact else False  # type: ignore[attr-defined]
    async with app.app_context():
        cached = CachedStatus.of("usr_1", RECORD, facts_of("awaiting_review", None, at(10)))
        for seconds in (10, 12.3456, 3600.0004):
            now = at(seconds)
            body = await cached.response(CHAT_URL, now).get_data(as_text=True)
            assert body == fresh_body(app, RECORD, facts_of("awaiting_review", None, now))
        metrics = (await cached.response(CHAT_URL, at(20)).get_json())["metrics"]
    # The open wait runs to now, the decided one stops at its decision.
    assert metrics["durationMs"] == 20_000
    assert metrics["reviewLatencyMs"] == [
        {"checkpointId": "chk_1", "attempt": 1, "ms": 3250},
        {"checkpointId": "chk_1", "attempt": 2, "ms": 10_500},
    ]
    assert metrics["reviewWaitMs"] == 13_750


async def test_a_finished_executions_cached_body_no_longer_moves(app: Quart) -> None:
    finished = facts_of("cancelled", at(30), at(31))
    async with app.app_context():
        cached = CachedStatus.of("usr_1", RECORD, finished)
        bodies = {await cached.response(CHAT_URL, at(seconds)).get_data(as_text=True) for seconds in (31, 500)}
        assert bodies == {fresh_body(app, RECORD, dataclasses.replace(finished, now=at(999)))}
    assert '"durationMs":30000' in bodies.pop()
