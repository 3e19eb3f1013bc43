"""The offline (rule-based) agent run end to end: it refuses a task it cannot fully carry out before doing
anything, never makes content up, runs the README's tasks, and binds each checkpoint to the step it guards."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from api.status import record_and_facts
from core.db import Database
from core.models import Execution
from core.settings import Settings
from review import decide
from tests.agents.test_runner import REVIEWER, claim_and_run, new_execution, snapshot

README = (Path(__file__).parents[2] / "README.md").read_text()
AGENTS_DOC = (Path(__file__).parents[2] / "docs" / "agents.md").read_text()


@pytest.mark.parametrize(
    ("description", "not_understood"),
    [
        (
            "Summarise this text: The meeting moved to 3pm. Bring the slides.",
            ["Summarise this text: The meeting moved to 3pm", "Bring the slides"],
        ),
        (
            'Write a note called n.md saying "x". Then classify the sentiment of 3 reviews. '
            'Then email a@example.com saying "done"',
            ["classify the sentiment of 3 reviews"],
        ),
        (
            "Fetch https://example.com/data.json and report the count",
            ["Fetch https://example.com/data.json and report the count"],
        ),
        # A mail without a body, a note without text: the agent would have to make the text up.
        (
            'Send an email to team@example.com with subject "Update". Then summarise.',
            ['Send an email to team@example.com with subject "Update"'],
        ),
        ("Write a note. Then wait 1 second.", ["Write a note"]),
        ("Résumez ce texte et envoyez-le à l'équipe.", ["Résumez ce texte et envoyez-le à l'équipe"]),
    ],
)
async def test_a_task_with_an_instruction_not_understood_fails_before_any_step(
    db: Database, settings: Settings, description: str, not_understood: list[str]
) -> None:
    exe = await new_execution(
        db,
        settings,
        description,
        test_mode="with-verification",
        checkpoints=[{"stage": "Sign-off", "verificationQuestion": "Happy with it?"}],
    )
    await claim_and_run(db, settings)
    snap = await snapshot(db, exe)
    assert snap.execution.status == "failed"
    error = snap.execution.error_info
    assert error is not None
    assert error["code"] == "task_not_understood"
    assert error["instructions"] == not_understood
    assert "did nothing" in error["detail"] and "VOUCH_AGENT_MODEL" in error["detail"]
    assert snap.execution.error == error["detail"]
    # Nothing done, nothing written or sent, no reviewer asked.
    assert (snap.calls, snap.mails, snap.files, snap.decisions) == ([], [], [], [])
    assert [cp.status for cp in snap.checkpoints] == ["pending"]
    assert snap.types == ["execution.created", "execution.started", "execution.failed"]
    assert snap.payloads("execution.failed") == [{"status": "failed", "error": error}]
    assert snap.execution.result is None

    async with db.reading() as session:
        record, _ = await record_and_facts(session, await session.get_one(Execution, exe))
    assert record["error"] == error
    assert record["agent"] == {"model": "offline", "kind": "rule-based"}


def _readme_tasks() -> list[str]:
    """The documented offline tasks: the README's First run, and docs/agents.md's vocabulary made concrete."""
    first_run = json.loads('"' + re.search(r'"taskDescription": "((?:[^"\\]|\\.)*)"', README).group(1) + '"')  # type: ignore[union-attr]
    section = AGENTS_DOC.split("## The offline agent", 1)[1].split("\n## ", 1)[0]
    bullets = re.findall(r"^- (.+)$", section, re.M)
    concrete = {
        "ADDRESS": "team@example.com",
        '"S"': '"Status"',
        '"B"': '"All good"',
        '"NAME"': '"notes.md"',
        '"TEXT"': '"v2 is out"',
        "N seconds": "0.1 seconds",
    }
    vocabulary = []
    for bullet in bullets:
        for word, value in concrete.items():
            bullet = bullet.replace(word, value)
        vocabulary.append(bullet)
    assert len(vocabulary) == 4, bullets
    return [first_run, ". ".join(vocabulary) + "."]


@pytest.mark.parametrize("description", _readme_tasks())
async def test_the_readme_tasks_run_to_completed(db: Database, settings: Settings, description: str) -> None:
    exe = await new_execution(db, settings, description)
    await claim_and_run(db, settings)
    snap = await snapshot(db, exe)
    assert snap.execution.status == "completed", snap.execution.error_info
    assert snap.execution.result is not None and snap.execution.result["unrecognised"] == []
    assert [c.status for c in snap.calls] == ["succeeded"] * len(snap.calls) and len(snap.calls) >= 3
    assert [m.recipient for m in snap.mails] == ["team@example.com"]
    assert [f.path for f in snap.files] == ["notes.md"] and snap.files[0].content == "v2 is out"


PRESS_AND_BOARD = (
    'Email board@acme.example with subject "Q3" saying "Revenue grew 12%". '
    'Then email press@acme.example with subject "Q3" saying "Acme grew 12% in Q3". Then summarise.'
)
BOARD = {"stage": "Board", "description": "The board hears first", "verificationQuestion": "OK to mail the board?"}
PRESS = {"stage": "Press", "description": "", "verificationQuestion": "OK to tell the press?"}


@pytest.mark.parametrize("order", ["board first", "press first"])
async def test_each_checkpoint_guards_the_mail_it_names(db: Database, settings: Settings, order: str) -> None:
    checkpoints = [BOARD, PRESS] if order == "board first" else [PRESS, BOARD]
    exe = await new_execution(db, settings, PRESS_AND_BOARD, test_mode="with-verification", checkpoints=checkpoints)
    seen: list[tuple[str, str, dict[str, object], list[str]]] = []
    for _ in range(2):
        await claim_and_run(db, settings)
        snap = await snapshot(db, exe)
        assert snap.execution.status == "awaiting_review"
        waiting = snap.payloads("checkpoint.awaiting_review")[-1]
        seen.append(
            (
                waiting["verificationQuestion"],
                waiting["nextAction"]["args"]["to"],
                waiting["guards"],
                [m.recipient for m in snap.mails],
            )
        )
        async with db.transaction() as session:
            await decide(session, waiting["checkpointId"], "approve", by=REVIEWER, via="web")
    board_step = {
        "step": 1,
        "tool": "send_email",
        "instruction": 'Email board@acme.example with subject "Q3" saying "Revenue grew 12%"',
    }
    press_step = {
        "step": 2,
        "tool": "send_email",
        "instruction": 'email press@acme.example with subject "Q3" saying "Acme grew 12% in Q3"',
    }
    # Each question is asked right before its own mail, and no mail goes out before its question is answered.
    assert seen == [
        ("OK to mail the board?", "board@acme.example", board_step, []),
        ("OK to tell the press?", "press@acme.example", press_step, ["board@acme.example"]),
    ]
    await claim_and_run(db, settings)
    done = await snapshot(db, exe)
    assert done.execution.status == "completed"
    assert [m.recipient for m in done.mails] == ["board@acme.example", "press@acme.example"]
    assert sorted(cp.status for cp in done.checkpoints) == ["approved", "approved"]


async def test_a_leftover_checkpoint_guards_the_finish(db: Database, settings: Settings) -> None:
    exe = await new_execution(
        db,
        settings,
        'Email board@acme.example saying "Q3 is out".',
        test_mode="with-verification",
        checkpoints=[BOARD, PRESS],
    )
    await claim_and_run(db, settings)
    first = (await snapshot(db, exe)).payloads("checkpoint.awaiting_review")[-1]
    assert first["guards"]["tool"] == "send_email"
    async with db.transaction() as session:
        await decide(session, first["checkpointId"], "approve", by=REVIEWER, via="web")
    await claim_and_run(db, settings)
    snap = await snapshot(db, exe)
    second = snap.payloads("checkpoint.awaiting_review")[-1]
    # The press checkpoint has no mail of its own left: it is passed before finishing, after the board's mail.
    assert second["verificationQuestion"] == "OK to tell the press?"
    assert second["guards"] == {"step": None, "tool": "finish", "instruction": "finish the task"}
    assert [m.recipient for m in snap.mails] == ["board@acme.example"]


async def test_without_verification_records_each_checkpoint_at_its_step(db: Database, settings: Settings) -> None:
    exe = await new_execution(db, settings, PRESS_AND_BOARD, checkpoints=[PRESS, BOARD])
    await claim_and_run(db, settings)
    snap = await snapshot(db, exe)
    assert snap.execution.status == "completed"
    # The board's checkpoint (position 1) is decided before the first mail, the press's before the second.
    order = [p["checkpointId"] for p in snap.payloads("checkpoint.decided")]
    assert order == [snap.checkpoints[1].id, snap.checkpoints[0].id]
