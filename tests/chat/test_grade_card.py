"""The `human` scorer's grade (issue 23) on the chat card: the card is a checkpoint of origin `grade` after the run
has completed, answered over Socket.IO with pass/fail, a rating and labels, once; and a checkpoint's decision in
the chat keeps its rating and labels too."""

from __future__ import annotations

import sqlalchemy as sa

from agents.providers import ModelRegistry
from agents.scoring import process_scoring
from core.db import Database
from core.models import Checkpoint, Decision, Execution
from core.settings import Settings
from tests.agents.test_runner import claim_and_run, new_execution
from tests.chat.helpers import REVIEWER, Watcher, sign_in
from tests.chat.test_socket import watcher_on

NOTE = 'Write a note called plan.md saying "ship it".'


async def test_the_grade_card_takes_a_fail_with_a_rating_and_labels(
    web: str, worker_db: Database, chat_settings: Settings, watchers: list[Watcher]
) -> None:
    exe = await new_execution(worker_db, chat_settings, NOTE, scorers=["human"])
    await claim_and_run(worker_db, chat_settings)
    assert await process_scoring(worker_db, chat_settings, ModelRegistry(chat_settings)) == 1
    cookie, csrf = await sign_in(worker_db, chat_settings.secret_key, REVIEWER)
    reviewer = await watcher_on(web, watchers, cookie=cookie)
    joined = await reviewer.join(exe)
    assert joined["canDecide"] is True
    (card,) = [e for e in joined["events"] if e["type"] == "checkpoint.awaiting_review"]
    assert (card["payload"]["origin"], card["payload"]["stage"]) == ("grade", "Grade the result")
    assert card["payload"]["nextAction"]["args"]["output"].startswith("Completed")
    checkpoint_id = card["payload"]["checkpointId"]

    bad = await reviewer.decide(exe, checkpoint_id, "reject", csrf=csrf, rating=0)
    assert (bad["ok"], bad["error"]) == (False, "invalid_decision") and "rating" in bad["message"]
    # A failing grade needs no comment: it sends nobody back to revise.
    done = await reviewer.decide(exe, checkpoint_id, "reject", csrf=csrf, rating=2, labels=["incomplete"])
    assert done["ok"] is True, done
    assert (done["decision"]["via"], done["decision"]["rating"], done["decision"]["labels"]) == (
        "chat",
        2,
        ["incomplete"],
    )
    again = await reviewer.decide(exe, checkpoint_id, "approve", csrf=csrf)
    assert (again["ok"], again["error"]) == (False, "already_decided")
    async with worker_db.reading() as session:
        execution = await session.get_one(Execution, exe)
        row = await session.scalar(sa.select(Decision).where(Decision.checkpoint_id == checkpoint_id))
    assert (execution.status, execution.verdict_state, execution.verdict_passed) == ("completed", "done", False)
    assert execution.verdict_score == 0.25
    assert row is not None and (row.rating, row.labels, row.via) == (2, ["incomplete"], "chat")


async def test_a_checkpoint_decided_in_the_chat_keeps_its_rating_and_labels(
    web: str, worker_db: Database, chat_settings: Settings, watchers: list[Watcher]
) -> None:
    exe = await new_execution(
        worker_db,
        chat_settings,
        NOTE,
        test_mode="with-verification",
        checkpoints=[{"stage": "Draft", "verificationQuestion": "Write it?"}],
    )
    await claim_and_run(worker_db, chat_settings)
    async with worker_db.reading() as session:
        checkpoint_id = await session.scalar(sa.select(Checkpoint.id).where(Checkpoint.execution_id == exe))
    assert checkpoint_id is not None
    cookie, csrf = await sign_in(worker_db, chat_settings.secret_key, REVIEWER)
    reviewer = await watcher_on(web, watchers, cookie=cookie)
    await reviewer.join(exe)
    done = await reviewer.decide(exe, checkpoint_id, "approve", csrf=csrf, rating=5, labels=["tidy", "fast"])
    assert done["ok"] is True, done
    async with worker_db.reading() as session:
        row = await session.scalar(sa.select(Decision).where(Decision.checkpoint_id == checkpoint_id))
    assert row is not None and (row.rating, row.labels) == (5, ["tidy", "fast"])
