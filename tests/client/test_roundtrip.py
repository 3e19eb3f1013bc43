"""Every endpoint through the sync client against a live server and worker, answers typed."""

from __future__ import annotations

from datetime import datetime

import pytest
from vouch_client import (
    Client,
    Conflict,
    CreatedTask,
    DecisionAnswer,
    ExecutionPage,
    NotFound,
    StatusRecord,
    TaskSpec,
)

from tests.client.conftest import OWNER, Vouch, plain_task, reviewed_task
from tests.client.helpers import status_when_sync


def test_create_wait_status_list_delete(vouch: Vouch) -> None:
    with Client(vouch.base, vouch.owner.key) as client:
        created = client.create_task(TaskSpec.model_validate(plain_task()))
        assert isinstance(created, CreatedTask)
        assert created.success and created.executionId.startswith("exe_") and created.checkpointCount == 0
        assert created.chatUrl.startswith(f"{vouch.base}/chat/{created.executionId}?token=")
        assert created.replayed is False

        final = client.wait(created.executionId, timeout=30)
        assert isinstance(final, StatusRecord)
        assert (final.status, final.final, final.testMode) == ("completed", True, "without-verification")
        assert isinstance(final.createdAt, datetime) and final.completedAt is not None
        assert final.metrics.steps == 2 and final.metrics.toolCalls == 2
        assert final.result is not None and "summary" in final.result
        assert client.status(created.executionId) == final

        page = client.list_executions(status="completed", limit=10)
        assert isinstance(page, ExecutionPage)
        assert [item.executionId for item in page.items] == [created.executionId]
        assert page.nextCursor is None and page.items[0].status == "completed"
        assert [item.executionId for item in client.iter_executions(page_size=1)] == [created.executionId]

        client.delete(created.executionId)
        with pytest.raises(NotFound) as gone:
            client.status(created.executionId)
        assert gone.value.code == "not_found" and gone.value.status == 404


def test_pages_follow_the_cursor(vouch: Vouch) -> None:
    with Client(vouch.base, vouch.owner.key) as client:
        made = [client.create_task(plain_task(f"run {n}")).executionId for n in range(3)]
        first = client.list_executions(limit=2)
        assert len(first.items) == 2 and first.nextCursor is not None
        second = client.list_executions(limit=2, cursor=first.nextCursor)
        assert second.nextCursor is None
        assert {i.executionId for i in (*first.items, *second.items)} == set(made)
        assert [i.executionId for i in client.iter_executions(page_size=2)] == list(reversed(made))


def test_patch_decide_and_cancel(vouch: Vouch) -> None:
    with Client(vouch.base, vouch.owner.key) as client:
        created = client.create_task(reviewed_task())
        assert created.checkpointCount == 1
        paused = status_when_sync(client, created.executionId, "awaiting_review")
        waiting = paused.waiting_checkpoint()
        assert waiting is not None and waiting.stage == "Send" and waiting.awaitingSince is not None

        patched = client.update(created.executionId, {"webhookUrl": "https://hooks.example.com/vouch"})
        assert patched.executionId == created.executionId and patched.assignedReviewer == OWNER

        answer = client.decide(created.executionId, waiting.checkpointId, "approve", "looks right")
        assert isinstance(answer, DecisionAnswer)
        assert (answer.decision.decision, answer.decision.by, answer.decision.via) == ("approve", OWNER, "api")
        assert answer.decision.comment == "looks right" and answer.decision.attempt == 1

        final = client.wait(created.executionId, timeout=30)
        assert final.status == "completed"
        decided = final.checkpoints[0]
        assert decided.status == "approved" and decided.decision is not None
        assert [a.decision for a in decided.attempts] == ["approve"]

        with pytest.raises(Conflict) as twice:
            client.decide(created.executionId, waiting.checkpointId, "reject", "too late")
        assert twice.value.code == "already_decided" and twice.value.errors[0].where == "/decision"

        other = client.create_task(reviewed_task())
        status_when_sync(client, other.executionId, "awaiting_review")
        cancelled = client.cancel(other.executionId)
        assert cancelled.status == "cancelled" and cancelled.completedAt is not None
        with pytest.raises(Conflict) as again:
            client.cancel(other.executionId)
        assert again.value.code == "execution_finished"


def test_every_create_field_the_server_accepts_can_be_sent(vouch: Vouch) -> None:
    task = {**plain_task("Chosen model"), "agentModel": "offline", "webhookEvents": ["checkpoint.decided"]}
    with Client(vouch.base, vouch.owner.key) as client:
        created = client.create_task(task)
        shown = client.status(created.executionId)
    assert shown.agentModel == "offline"
