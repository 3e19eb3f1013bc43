"""Reject → revise: the comment is on record for the agent, attempts are numbered, N rejections end the run.
(That a comment-reading agent hears it verbatim: tests/agents/test_model_checkpoints.py.)"""

from __future__ import annotations

import pytest
import sqlalchemy as sa
from pydantic import ValidationError

from agents.claims import claim_next
from api.schemas import CreateTaskIn
from api.status import status_record
from core.db import Database
from core.models import Execution
from core.settings import Settings
from core.vocabulary import PERSON_CHANNELS, Channel
from review import AlreadyDecided, InvalidInput, decide
from tests.agents.test_runner import (
    BEFORE_SENDING,
    NOTE_THEN_MAIL,
    REVIEWER,
    claim_and_run,
    new_execution,
    snapshot,
)

COMMENT = "Use the formal tone — «Sehr geehrte» — and\nsign with the team's name."


async def start(
    db: Database, settings: Settings, max_revisions: int, *, reads_comments: bool = True
) -> tuple[str, str]:
    exe = await new_execution(
        db,
        settings,
        NOTE_THEN_MAIL,
        checkpoints=[BEFORE_SENDING],
        test_mode="with-verification",
        maxRevisions=max_revisions,
    )
    if reads_comments:
        # The revision loop is review.decide's, for agents that read comments. The offline agent, made with
        # reads_comments false (its rejection ends the run: test below), stands in for one here: sent back, it
        # asks again at the pending checkpoint, and needs no model.
        async with db.transaction() as session:
            await session.execute(sa.update(Execution).where(Execution.id == exe).values(reads_comments=True))
    await claim_and_run(db, settings)
    snap = await snapshot(db, exe)
    return exe, snap.checkpoints[0].id


async def test_reject_records_the_comment_for_the_agent_and_it_asks_again(db: Database, settings: Settings) -> None:
    exe, checkpoint_id = await start(db, settings, max_revisions=3)
    async with db.transaction() as session:
        record = await decide(session, checkpoint_id, "reject", by=REVIEWER, via=Channel.WEB, comment=COMMENT)
    assert record.attempt == 1
    snap = await snapshot(db, exe)
    assert snap.execution.status == "running"  # runnable again: the agent must revise
    assert (snap.checkpoints[0].status, snap.checkpoints[0].attempt) == ("pending", 2)
    assert snap.payloads("checkpoint.revision_requested") == [
        {"checkpointId": checkpoint_id, "attempt": 1, "nextAttempt": 2, "comment": COMMENT, "by": REVIEWER}
    ]

    await claim_and_run(db, settings, "worker-2")
    snap = await snapshot(db, exe)
    assert snap.execution.status == "awaiting_review"
    asks = snap.payloads("checkpoint.awaiting_review")
    assert [a["attempt"] for a in asks] == [1, 2]
    assert asks[1]["nextAction"] == asks[0]["nextAction"]  # the same checkpoint, before the same step
    # The step done before the checkpoint is not repeated: its side effect happened once.
    assert [(c.tool, c.step_index, c.status) for c in snap.calls] == [
        ("write_file", 0, "succeeded"),
        ("send_email", 1, "proposed"),  # held back by the checkpoint, once, across both attempts
    ]

    # A stale answer to attempt 1 is refused, naming its winner; attempt 2 is answered normally.
    with pytest.raises(AlreadyDecided, match=r"already rejected by reviewer@example\.com via web at .*Z$"):
        async with db.transaction() as session:
            await decide(session, checkpoint_id, "approve", by=REVIEWER, via=Channel.EMAIL, attempt=1)
    async with db.transaction() as session:
        second = await decide(session, checkpoint_id, "approve", by=REVIEWER, via=Channel.API, comment="better")
    assert second.attempt == 2
    await claim_and_run(db, settings, "worker-3")
    snap = await snapshot(db, exe)
    assert snap.execution.status == "completed"
    assert [(c.tool, c.status) for c in snap.calls] == [("write_file", "succeeded"), ("send_email", "succeeded")]

    async with db.reading() as session:
        record_json = await status_record(session, await session.get_one(Execution, exe), "http://x/chat")
    (cp,) = record_json["checkpoints"]
    assert cp["status"] == "approved" and cp["attempt"] == 2
    assert cp["decision"]["decision"] == "approve" and cp["decision"]["attempt"] == 2
    assert [(a["attempt"], a["decision"], a["via"], a["comment"]) for a in cp["attempts"]] == [
        (1, "reject", "web", COMMENT),
        (2, "approve", "api", "better"),
    ]


@pytest.mark.parametrize("max_revisions", [0, 2])
async def test_the_rejection_after_max_revisions_ends_the_run(
    db: Database, settings: Settings, max_revisions: int
) -> None:
    exe, checkpoint_id = await start(db, settings, max_revisions=max_revisions)
    for attempt in range(1, max_revisions + 1):
        async with db.transaction() as session:
            await decide(session, checkpoint_id, "reject", by=REVIEWER, via=Channel.CHAT, comment=f"try {attempt}")
        await claim_and_run(db, settings, f"worker-{attempt + 1}")
        snap = await snapshot(db, exe)
        assert (snap.execution.status, snap.checkpoints[0].attempt) == ("awaiting_review", attempt + 1)
    async with db.transaction() as session:
        await decide(session, checkpoint_id, "reject", by=REVIEWER, via=Channel.CHAT, comment="no")
    snap = await snapshot(db, exe)
    assert snap.execution.status == "rejected"
    assert [(d.attempt, d.decision) for d in snap.decisions] == [(n, "reject") for n in range(1, max_revisions + 2)]
    assert snap.payloads("execution.rejected")[0]["attempt"] == max_revisions + 1
    assert len(snap.payloads("checkpoint.revision_requested")) == max_revisions
    assert await claim_next(db, "worker-x", 30) is None
    assert snap.mails == [] and [c.status for c in snap.calls if c.tool == "send_email"] == ["proposed"]


async def test_a_rule_based_agent_s_rejection_ends_the_run_with_the_comment(db: Database, settings: Settings) -> None:
    # maxRevisions 3, but the offline agent cannot read the comment: revising would only ask the same again.
    exe, checkpoint_id = await start(db, settings, max_revisions=3, reads_comments=False)
    async with db.transaction() as session:
        record = await decide(session, checkpoint_id, "reject", by=REVIEWER, via=Channel.CHAT, comment=COMMENT)
    assert record.attempt == 1
    snap = await snapshot(db, exe)
    assert snap.execution.status == "rejected"
    assert (snap.checkpoints[0].status, snap.checkpoints[0].attempt) == ("rejected", 1)
    assert snap.payloads("checkpoint.revision_requested") == []
    (ended,) = snap.payloads("execution.rejected")
    assert (ended["comment"], ended["by"], ended["attempt"]) == (COMMENT, REVIEWER, 1)
    assert await claim_next(db, "worker-x", 30) is None
    assert snap.mails == [] and [c.status for c in snap.calls if c.tool == "send_email"] == ["proposed"]


async def test_every_person_s_rejection_needs_a_comment(db: Database, settings: Settings) -> None:
    _, checkpoint_id = await start(db, settings, max_revisions=3)
    for via in PERSON_CHANNELS:
        with pytest.raises(InvalidInput, match="comment is required to reject") as refused:
            async with db.transaction() as session:
                await decide(session, checkpoint_id, "reject", by=REVIEWER, via=via, comment="  \n ")
        assert refused.value.pointer == "/comment"
    # A deadline's rejection has nobody to write one: it needs none.
    async with db.transaction() as session:
        timed_out = await decide(session, checkpoint_id, "reject", by="vouch", via=Channel.TIMEOUT)
    assert timed_out.comment == ""


def test_review_fields_are_validated() -> None:
    base = {"taskName": "t", "taskDescription": "d"}
    assert CreateTaskIn.model_validate(base).maxRevisions == 3
    for bad in (-1, 11, "3", 2.5):
        with pytest.raises(ValidationError):
            CreateTaskIn.model_validate({**base, "maxRevisions": bad})
    for field, bad in (
        ("reviewDeadline", 0),
        ("reviewDeadline", "PT1H"),
        ("onDeadline", "ignore"),
        ("backupReviewer", "not an address"),
    ):
        with pytest.raises(ValidationError):
            CreateTaskIn.model_validate({**base, field: bad})
    task = CreateTaskIn.model_validate(
        {**base, "backupReviewer": " Backup@Example.com ", "reviewDeadline": 3600, "onDeadline": "cancel"}
    )
    assert (task.backupReviewer, task.reviewDeadline, task.onDeadline) == ("backup@example.com", 3600, "cancel")
