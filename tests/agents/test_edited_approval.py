"""Issue 20.4: an approval with edited arguments runs the gated call with them (offline and model agents), keeps
both sets on record, and tells the model what changed; edits the tool would refuse are refused, naming the
argument."""

from __future__ import annotations

import json
from typing import Any

import pytest

from core.db import Database
from core.settings import Settings
from core.vocabulary import Channel
from review import InvalidInput, decide
from review.decisions import Verdict
from tests.agents.test_model_agent import MAIL, MAIL_TASK, model_settings, run
from tests.agents.test_runner import BEFORE_SENDING, NOTE_THEN_MAIL, REVIEWER, claim_and_run, new_execution, snapshot
from tests.support.fake_llm import call, fake_llm, last_tool_result

OFFLINE_MAIL = 'Send an email to bob@example.com with subject "Draft" saying "Hello Bob"'


async def gated_offline_run(db: Database, settings: Settings) -> tuple[str, str]:
    exe = await new_execution(db, settings, OFFLINE_MAIL, test_mode="with-verification", autoDetectCheckpoints=True)
    await claim_and_run(db, settings)
    snap = await snapshot(db, exe)
    assert snap.execution.status == "awaiting_review"
    return exe, snap.checkpoints[0].id


async def test_the_model_s_call_runs_with_the_edits_and_the_model_is_told(db: Database, settings: Settings) -> None:
    final = "Weekly report (final)"
    async with fake_llm(call("send_email", **MAIL), call("finish", summary="Sent.")) as llm:
        config = model_settings(settings, llm)
        exe = await new_execution(
            db,
            config,
            MAIL_TASK,
            test_mode="with-verification",
            agent_model="openai:scripted",
            autoDetectCheckpoints=True,
        )
        await run(db, config)
        snap = await snapshot(db, exe)
        (checkpoint,) = snap.checkpoints
        assert checkpoint.next_action is not None
        assert (checkpoint.next_action["tool"], checkpoint.next_action["args"]) == ("send_email", MAIL)
        assert checkpoint.next_action["editable"] is True
        async with db.transaction() as session:
            record = await decide(
                session, checkpoint.id, "approve", by=REVIEWER, via=Channel.API, edited_args={"subject": final}
            )
        assert (record.original_args, record.edited_args) == (MAIL, {"subject": final})
        await run(db, config)
        snap = await snapshot(db, exe)
        assert snap.execution.status == "completed", snap.execution.error
        assert [(m.recipient, m.subject, m.text_body) for m in snap.mails] == [(MAIL["to"], final, MAIL["body"])]
        (sent,) = snap.calls
        assert (sent.args, sent.proposed_args) == ({**MAIL, "subject": final}, MAIL)
        told = json.loads(last_tool_result(llm.requests[1]))
        assert told["reviewerEdited"] == {"subject": {"proposed": MAIL["subject"], "approved": final}}
        assert told["subject"] == final
        (decided,) = snap.payloads("checkpoint.decided")
        assert (decided["originalArgs"], decided["editedArgs"], decided["via"]) == (MAIL, {"subject": final}, "api")


async def test_the_offline_agent_s_gated_call_runs_with_the_edits(db: Database, settings: Settings) -> None:
    exe, checkpoint_id = await gated_offline_run(db, settings)
    snap = await snapshot(db, exe)
    proposed = {"to": "bob@example.com", "subject": "Draft", "body": "Hello Bob"}
    assert snap.checkpoints[0].next_action is not None
    assert snap.checkpoints[0].next_action["args"] == proposed
    (awaiting,) = snap.payloads("checkpoint.awaiting_review")
    assert awaiting["nextAction"]["editable"] is True and awaiting["readsComments"] is False
    async with db.transaction() as session:
        await decide(
            session,
            checkpoint_id,
            "approve",
            by=REVIEWER,
            via=Channel.WEB,
            edited_args={"to": "carol@example.com", "subject": "Draft", "body": "Hello Carol"},
        )
    snap = await snapshot(db, exe)
    # Only what differs is an edit: the subject was sent back as it was.
    assert snap.decisions[0].edited_args == {"to": "carol@example.com", "body": "Hello Carol"}
    assert snap.decisions[0].original_args == proposed
    await claim_and_run(db, settings, "worker-2")
    snap = await snapshot(db, exe)
    assert snap.execution.status == "completed", snap.execution.error
    assert [(m.recipient, m.subject, m.text_body) for m in snap.mails] == [
        ("carol@example.com", "Draft", "Hello Carol")
    ]
    assert snap.calls[0].proposed_args == proposed
    # The proposal stays on the checkpoint once decided: the record of what was asked.
    assert snap.checkpoints[0].next_action is not None and snap.checkpoints[0].next_action["args"] == proposed


@pytest.mark.parametrize(
    ("verdict", "edits", "pointer", "detail"),
    [
        ("approve", {"subject": "two\nlines"}, "/editedArgs/subject", "single line"),
        ("approve", {"cc": "eve@example.com"}, "/editedArgs/cc", "not an argument of send_email"),
        ("approve", {"to": "a@example.com, b@example.com"}, "/editedArgs/to", "exactly one e-mail address"),
        ("approve", {"body": 42}, "/editedArgs/body", "must be text"),
        ("approve", {}, "/editedArgs", "at least one argument"),
        ("reject", {"subject": "New"}, "/editedArgs", "only come with approve"),
    ],
)
async def test_edits_the_tool_would_refuse_are_refused_naming_the_argument(
    db: Database, settings: Settings, verdict: Verdict, edits: dict[str, Any], pointer: str, detail: str
) -> None:
    exe, checkpoint_id = await gated_offline_run(db, settings)
    with pytest.raises(InvalidInput, match=detail) as refused:
        async with db.transaction() as session:
            await decide(
                session,
                checkpoint_id,
                verdict,
                by=REVIEWER,
                via=Channel.API,
                comment="why",
                edited_args=edits,
            )
    assert refused.value.pointer == pointer
    snap = await snapshot(db, exe)
    assert (snap.execution.status, snap.decisions) == ("awaiting_review", [])


async def test_a_caller_checkpoint_holds_its_steps_call_and_approves_it_edited(
    db: Database, settings: Settings
) -> None:
    """The rule-based agent cannot read a comment: editing is how its action changes, at a caller's checkpoint too."""
    exe = await new_execution(db, settings, NOTE_THEN_MAIL, checkpoints=[BEFORE_SENDING], test_mode="with-verification")
    await claim_and_run(db, settings)
    snap = await snapshot(db, exe)
    (checkpoint,) = snap.checkpoints
    held = [c for c in snap.calls if c.tool == "send_email"]
    assert [c.status for c in held] == ["proposed"] and snap.mails == []
    assert checkpoint.next_action is not None and checkpoint.next_action["editable"] is True
    assert checkpoint.next_action["toolCallId"] == held[0].id == checkpoint.tool_call_id
    proposed = dict(checkpoint.next_action["args"])
    async with db.transaction() as session:
        await decide(
            session, checkpoint.id, "approve", by=REVIEWER, via=Channel.CHAT, edited_args={"subject": "Edited"}
        )
    await claim_and_run(db, settings)
    snap = await snapshot(db, exe)
    assert snap.execution.status == "completed", snap.execution.error
    assert [(m.recipient, m.subject) for m in snap.mails] == [(proposed["to"], "Edited")]
    (sent,) = [c for c in snap.calls if c.tool == "send_email"]
    assert (sent.args, sent.proposed_args) == ({**proposed, "subject": "Edited"}, proposed)


async def test_a_call_behind_two_checkpoints_runs_with_both_reviewers_edits(db: Database, settings: Settings) -> None:
    """The caller's checkpoint, then the auto-detected one: the second reviewer sees the call as the first approved
    it, and the call runs with both approvals' edits."""
    async with fake_llm(call("send_email", **MAIL), call("finish", summary="Sent.")) as llm:
        config = model_settings(settings, llm)
        exe = await new_execution(
            db,
            config,
            MAIL_TASK,
            checkpoints=[BEFORE_SENDING],
            test_mode="with-verification",
            agent_model="openai:scripted",
            autoDetectCheckpoints=True,
        )
        await run(db, config)
        snap = await snapshot(db, exe)
        (caller,) = [c for c in snap.checkpoints if c.origin == "caller"]
        assert caller.status == "awaiting_review" and caller.next_action is not None
        assert caller.next_action["args"] == MAIL
        async with db.transaction() as session:
            await decide(session, caller.id, "approve", by=REVIEWER, via=Channel.WEB, edited_args={"subject": "One"})
        await run(db, config)
        snap = await snapshot(db, exe)
        (auto,) = [c for c in snap.checkpoints if c.origin == "auto"]
        assert auto.status == "awaiting_review" and auto.next_action is not None
        assert auto.next_action["args"] == {**MAIL, "subject": "One"}
        assert snap.mails == []
        async with db.transaction() as session:
            await decide(session, auto.id, "approve", by=REVIEWER, via=Channel.API, edited_args={"body": "Two"})
        await run(db, config)
        snap = await snapshot(db, exe)
        assert snap.execution.status == "completed", snap.execution.error
        assert [(m.recipient, m.subject, m.text_body) for m in snap.mails] == [(MAIL["to"], "One", "Two")]
        (sent,) = snap.calls
        assert (sent.args, sent.proposed_args) == ({**MAIL, "subject": "One", "body": "Two"}, MAIL)
        told = json.loads(last_tool_result(llm.requests[1]))
        assert told["reviewerEdited"] == {
            "subject": {"proposed": MAIL["subject"], "approved": "One"},
            "body": {"proposed": MAIL["body"], "approved": "Two"},
        }
