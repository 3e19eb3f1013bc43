"""The `human` scorer's grade (issue 23) as a checkpoint after the run: asked by mail with single-use links whose
page takes pass/fail, a rating and labels; its own deadline, after which the grade is missing (never a pass);
and the scoring itself done once, under a lease that a dead worker's run lets lapse."""

from __future__ import annotations

import asyncio
from datetime import timedelta

import sqlalchemy as sa

from agents.providers import ModelRegistry
from agents.scoring import claim_scoring, process_scoring, score_execution
from core.db import Database
from core.models import Checkpoint, Event, Execution, utcnow
from core.settings import Settings
from core.vocabulary import Channel
from review import AlreadyDecided, decide
from review.timers import process_due_timers
from tests.agents.test_runner import REVIEWER as RUN_REVIEWER
from tests.agents.test_runner import claim_and_run, new_execution
from tests.api.helpers import account, create_ok, get_status, task, wait_for
from tests.conftest import Service
from tests.review.mail_support import REVIEWER, links_in, review_mail
from tests.web.browser import Browser

NOTE = 'Write a note called plan.md saying "ship it".'


async def test_the_grade_by_mail_link_takes_pass_a_rating_and_labels_once(service: Service) -> None:
    owner = await account(service, "owner@example.com", "eval:manage")
    execution_id = await create_ok(
        service,
        owner.key,
        task(taskDescription=NOTE, agentModel="offline", assignedReviewer=REVIEWER, scorers=["human"]),
    )
    record = await wait_for(service, owner.key, execution_id, lambda r: (r["verdict"] or {}).get("state") == "grading")
    assert record["status"] == "completed"
    output = record["result"]["output"]
    assert output == record["result"]["summary"] and output.startswith("Completed")
    mail = await review_mail(service, execution_id)
    assert mail.subject.startswith("Grade the result: ")
    assert "Pass: " in mail.text_body and "Fail: " in mail.text_body
    links = links_in(mail.text_body)
    browser = Browser(service.app, addr="203.0.113.7")
    page = await browser.get(links["approve"])
    assert page.status == 200 and "Grade the result: pass?" in page.text and output in page.text
    assert (await get_status(service, owner.key, execution_id))["verdict"]["state"] == "grading"

    bad = await browser.post(links["approve"], {"csrf_token": page.csrf(), "rating": "6"})
    assert bad.status == 422 and "rating must be a whole number from 1 to 5" in bad.text
    done = await browser.post(
        links["approve"],
        {"csrf_token": bad.csrf(), "rating": "5", "labels": "concise, correct", "comment": "Spot on"},
    )
    assert done.status == 200, done.text
    record = await wait_for(service, owner.key, execution_id, lambda r: r["verdict"]["state"] == "done")
    verdict = record["verdict"]
    assert (verdict["passed"], verdict["score"]) == (True, 1.0)
    (human,) = verdict["scores"]
    assert (human["by"], human["via"], human["rating"], human["labels"]) == (
        REVIEWER,
        "email",
        5,
        ["concise", "correct"],
    )
    again = await browser.post(links["approve"], {"csrf_token": page.csrf(), "rating": "1"})
    assert again.status == 410 and "cannot decide again" in again.text
    other = await browser.get(links["reject"])
    assert other.status == 410


async def test_no_grade_by_the_deadline_is_no_pass(db: Database, settings: Settings) -> None:
    execution_id = await new_execution(
        db, settings, NOTE, expected="x", scorers=["includes", {"type": "human", "deadline": 60}]
    )
    await claim_and_run(db, settings)
    models = ModelRegistry(settings)
    assert await process_scoring(db, settings, models) == 1
    async with db.reading() as session:
        checkpoint = await session.scalar(
            sa.select(Checkpoint).where(Checkpoint.execution_id == execution_id, Checkpoint.origin == "grade")
        )
    assert checkpoint is not None and checkpoint.status == "awaiting_review"
    assert await process_due_timers(db, settings, now=utcnow() + timedelta(seconds=59)) == 0
    assert await process_due_timers(db, settings, now=utcnow() + timedelta(seconds=61)) == 1
    async with db.reading() as session:
        execution = await session.get_one(Execution, execution_id)
    assert (execution.status, execution.verdict_state, execution.verdict_passed) == ("completed", "done", False)
    assert execution.verdict_scores is not None
    human = execution.verdict_scores[1]
    assert (human["passed"], human["score"], human["explanation"]) == (
        None,
        None,
        "no grade before the grading deadline",
    )
    try:
        async with db.transaction() as session:
            await decide(session, checkpoint.id, "approve", by=RUN_REVIEWER, via=Channel.API)
    except AlreadyDecided as exc:
        assert "cancelled by vouch via timeout" in str(exc)
    else:
        raise AssertionError("a grade after the deadline was taken")


async def test_a_run_is_scored_once_and_a_dead_scorers_lease_lapses(db: Database, settings: Settings) -> None:
    first = await new_execution(db, settings, NOTE, expected="plan.md", scorers=["includes"])
    await claim_and_run(db, settings)
    second = await new_execution(db, settings, NOTE, expected="plan.md", scorers=["includes"])
    await claim_and_run(db, settings)
    models = ModelRegistry(settings)
    # Two workers at once on the first run: one scores it.
    both = await asyncio.gather(*(score_execution(db, settings, models, first) for _ in range(2)))
    assert sorted(both) == [False, True]
    # A worker took the second and died before recording: nobody scores it while its lease holds...
    assert await claim_scoring(db, settings, second, utcnow()) is not None
    assert await process_scoring(db, settings, models) == 0
    # ...and the next worker does once it has lapsed.
    later = utcnow() + timedelta(seconds=settings.worker_lease_seconds + 1)
    assert await process_scoring(db, settings, models, now=later) == 1
    assert await process_scoring(db, settings, models, now=later) == 0
    # A scored run is never claimed again, lease or not: its scorers (a paid judge's too) would run for nothing.
    much_later = later + timedelta(seconds=2 * settings.worker_lease_seconds)
    assert await claim_scoring(db, settings, first, much_later) is None
    async with db.reading() as session:
        rows = (
            await session.execute(
                sa.select(Execution.id, Execution.verdict_state, Execution.verdict_passed).order_by(Execution.id)
            )
        ).all()
        scored = await session.scalar(
            sa.select(sa.func.count()).select_from(Event).where(Event.type == "execution.scored")
        )
    assert sorted((r.verdict_state, r.verdict_passed) for r in rows) == [("done", True), ("done", True)]
    assert scored == 2
