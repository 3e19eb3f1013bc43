"""core.metrics against scripted runs whose every timestamp is chosen: exact numbers, on each database."""

from __future__ import annotations

from typing import Any

from chat.conversation import run_metrics
from core.db import Database
from core.metrics import execution_metrics
from core.models import Execution
from core.settings import Settings
from tests.conftest import Account, Service, bearer, make_account
from tests.support.scripted_run import Script, at, rejected_then_approved


async def _metrics(db: Database, execution_id: str, **kwargs: Any) -> dict[str, Any]:
    async with db.reading() as session:
        execution = await session.get_one(Execution, execution_id)
        return await execution_metrics(session, execution, **kwargs)


async def _owner(db: Database, settings: Settings) -> Account:
    return await make_account(db, settings, "owner@example.com")


async def test_rejected_then_approved_run(db: Database, settings: Settings) -> None:
    owner = await _owner(db, settings)
    script = rejected_then_approved(owner.user_id)
    execution_id = await script.write(db)
    first = script.checkpoints[0].id
    assert await _metrics(db, execution_id) == {
        "durationMs": 120_000,
        # 700 + 800 ms of model requests, 300.5 + 1200 + 99.5 ms of tools.
        "agentMs": 3100,
        # Both attempts of the first checkpoint: 3 s → 13 s (rejected) and 16 s → 46 s (approved).
        "reviewWaitMs": 40_000,
        "timeToFirstEventMs": 1250,
        "steps": 3,
        "modelRequests": 2,
        "inputTokens": 300,
        "outputTokens": 50,
        "toolCalls": 3,
        "toolCallsByTool": {"send_email": 1, "write_file": 2},
        "checkpointsApproved": 2,
        "checkpointsRejected": 1,
        "revisions": 1,
        "reviewLatencyMs": [
            {"checkpointId": first, "attempt": 1, "ms": 10_000},
            {"checkpointId": first, "attempt": 2, "ms": 30_000},
        ],
        "costUsd": 0.0037,
    }


async def test_unknown_price_and_no_model(db: Database, settings: Settings) -> None:
    owner = await _owner(db, settings)
    priced = Script(owner.user_id)
    priced.model(2, 500, 10, 5, 0.5)
    priced.model(3, 500, 10, 5, None)
    assert (await _metrics(db, await priced.write(db)))["costUsd"] is None

    # The offline agent: no model requests, so no tokens and no price; no agent event yet either.
    offline = Script(owner.user_id, status="queued", completed=None)
    found = await _metrics(db, await offline.write(db), now=at(7.5))
    assert found["modelRequests"] == found["inputTokens"] == found["outputTokens"] == 0
    assert found["costUsd"] is None
    assert found["timeToFirstEventMs"] is None
    assert found["durationMs"] == 7500  # still under way: to now


async def test_open_waits_run_to_now_or_to_the_end(db: Database, settings: Settings) -> None:
    owner = await _owner(db, settings)
    waiting = Script(owner.user_id, status="awaiting_review", completed=None)
    checkpoint = waiting.checkpoint("Draft", status="awaiting_review", awaiting_since=10)
    waiting.wait(10, checkpoint, 1)
    found = await _metrics(db, await waiting.write(db), now=at(25))
    assert found["reviewWaitMs"] == 15_000
    assert found["reviewLatencyMs"] == [{"checkpointId": checkpoint, "attempt": 1, "ms": 15_000}]

    # Cancelled while it waited: the clock stops at the end, however late it is read.
    cancelled = Script(owner.user_id, status="cancelled", completed=40)
    checkpoint = cancelled.checkpoint("Draft", status="awaiting_review", awaiting_since=10)
    cancelled.wait(10, checkpoint, 1)
    found = await _metrics(db, await cancelled.write(db), now=at(9999))
    assert found["reviewWaitMs"] == 30_000
    assert found["durationMs"] == 40_000


async def test_status_api_and_chat_give_the_same_numbers(api_only: Service) -> None:
    owner = await api_only.account("owner@example.com", "eval:read")
    execution_id = await rejected_then_approved(owner.user_id).write(api_only.db)
    expected = await _metrics(api_only.db, execution_id)
    response = await api_only.client.get(f"/api/eval/status/{execution_id}", headers=bearer(owner.key))
    assert response.status_code == 200, await response.get_data(as_text=True)
    assert (await response.get_json())["metrics"] == expected
    async with api_only.db.reading() as session:
        assert await run_metrics(session, await session.get_one(Execution, execution_id)) == expected
