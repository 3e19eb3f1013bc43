"""The review policy fields over the API: create stores them, status shows attempts, the decision endpoint
accepts the backup reviewer once (and only once) the waiting attempt was escalated."""

from __future__ import annotations

from datetime import timedelta

import sqlalchemy as sa

from core.models import Checkpoint, Execution
from review.timers import process_due_timers
from tests.api.helpers import account, create_ok, decide, get_status, paused_at, task, wait_for
from tests.conftest import Service

CHECKPOINT = {"stage": "Before sending", "verificationQuestion": "Send the e-mail?"}


async def test_create_stores_the_review_policy(service: Service) -> None:
    owner = await account(service, "owner@example.com", "eval:manage")
    execution_id = await create_ok(
        service,
        owner.key,
        task(
            checkpoints=[CHECKPOINT],
            assignedReviewer=owner.email,
            maxRevisions=5,
            backupReviewer="Backup@Example.com",
            reviewDeadline=7200,
            onDeadline="approve",
        ),
    )
    async with service.db.reading() as session:
        row = await session.get_one(Execution, execution_id)
    assert (row.max_revisions, row.backup_reviewer, row.review_deadline_seconds, row.on_deadline) == (
        5,
        "backup@example.com",
        7200,
        "approve",
    )
    record = await wait_for(service, owner.key, execution_id, paused_at(0))
    assert record["checkpoints"][0]["attempt"] == 1
    assert record["checkpoints"][0]["attempts"] == []


async def test_backup_reviewer_decides_over_the_api_after_escalation(service: Service) -> None:
    owner = await account(service, "owner@example.com", "eval:manage")
    backup = await account(service, "backup@example.com", "eval:manage")
    execution_id = await create_ok(
        service,
        owner.key,
        task(
            taskDescription="Send an email to bob@example.com saying hi.",
            checkpoints=[CHECKPOINT],
            assignedReviewer="away@example.com",
            backupReviewer=backup.email,
        ),
    )
    record = await wait_for(service, owner.key, execution_id, paused_at(0))
    checkpoint_id = record["checkpoints"][0]["checkpointId"]
    code, body = await decide(service, backup.key, execution_id, checkpoint_id, {"decision": "approve"})
    assert code == 404, body  # not (yet) anyone's business of theirs: indistinguishable from unknown

    async with service.db.reading() as session:
        since = await session.scalar(sa.select(Checkpoint.awaiting_since).where(Checkpoint.id == checkpoint_id))
    assert since is not None
    later = since + timedelta(minutes=service.settings.review_escalation_minutes + 1)
    assert await process_due_timers(service.db, service.settings, later) == 2
    code, body = await decide(service, backup.key, execution_id, checkpoint_id, {"decision": "approve"})
    assert code == 200, body
    assert (body["decision"]["by"], body["decision"]["via"], body["decision"]["attempt"]) == (backup.email, "api", 1)
    status = await get_status(service, owner.key, execution_id)
    assert status["checkpoints"][0]["attempts"][0]["by"] == backup.email
    assert status["checkpoints"][0]["attempts"][0]["remoteAddr"] is not None
