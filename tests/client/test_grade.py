"""Issue 23 through the client and its CLI against a live server: a task with `expected` and scorers, the human
grade given with `vouch tasks grade` (pass, rating, labels), the verdict read back by the client and shown by
`vouch tasks status`, and a checkpoint decided with `--rating` and `--label`."""

from __future__ import annotations

import asyncio

from vouch_client import Client, StatusRecord, TaskSpec

from tests.client.conftest import OWNER, Vouch, plain_task, reviewed_task
from tests.client.helpers import status_when_sync
from tests.client.test_cli import _vouch
from tests.support.waiting import until


def _verdict_when(client: Client, execution_id: str, state: str) -> StatusRecord:
    async def check() -> StatusRecord | None:
        found = client.status(execution_id)
        return found if found.verdict is not None and found.verdict.state == state else None

    return asyncio.run(until(check, timeout=30))


def test_a_grade_from_the_cli_records_the_verdict(vouch: Vouch) -> None:
    spec = TaskSpec.model_validate(
        {**plain_task("Graded"), "expected": "a.md", "scorers": ["includes", "human"], "assignedReviewer": OWNER}
    )
    with Client(vouch.base, vouch.owner.key) as client:
        execution_id = client.create_task(spec).executionId
        waiting = _verdict_when(client, execution_id, "grading")
        grade = waiting.grade_checkpoint()
        assert grade is not None and grade.stage == "Grade the result"
        done = _vouch(vouch, "tasks", "grade", execution_id, "pass", "--rating", "4", "--label", "neat")
        assert done.returncode == 0, done.stderr
        assert done.stdout.strip() == f"{execution_id} graded pass by {OWNER} via api"
        record = _verdict_when(client, execution_id, "done")
    assert record.verdict is not None
    assert (record.verdict.passed, record.verdict.score) == (True, 0.875)
    assert [(s.scorer, s.passed) for s in record.verdict.scores] == [("includes", True), ("human", True)]
    shown = _vouch(vouch, "tasks", "status", execution_id)
    assert "  verdict: passed, score 0.88 (done)" in shown.stdout
    again = _vouch(vouch, "tasks", "grade", execution_id, "fail")
    assert again.returncode == 5 and again.stderr.startswith("vouch: already_decided: ")


def test_a_checkpoint_decided_from_the_cli_keeps_its_rating_and_labels(vouch: Vouch) -> None:
    with Client(vouch.base, vouch.owner.key) as client:
        execution_id = client.create_task(reviewed_task()).executionId
        checkpoint = status_when_sync(client, execution_id, "awaiting_review").checkpoints[0].checkpointId
        decided = _vouch(
            vouch, "checkpoints", "decide", execution_id, checkpoint, "approve", "--rating", "3", "--label", "slow"
        )
        assert decided.returncode == 0, decided.stderr
        record = client.status(execution_id)
    decision = record.checkpoints[0].attempts[0]
    assert (decision.rating, decision.labels) == (3, ["slow"])
