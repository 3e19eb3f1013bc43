"""Issue 20 over HTTP: the exact action in the status record, the review mail and its link page; the API's
edited approval and its refusals (a rejection needs a comment; edits go with approve only and must be valid)."""

from __future__ import annotations

import re
from typing import Any

import sqlalchemy as sa

from core.models import MailMessage, ToolCall
from tests.api.helpers import account, create_ok, decide, get_status, has_status, paused_at, task, wait_for
from tests.conftest import Account, Service

# A body long enough that a surface which cut it would show; markup that must arrive as text, not HTML.
BODY = "Dear Bob, <b>the figures</b> & <script>alert(1)</script> follow. " + " ".join(
    f"Line {n}: all green." for n in range(150)
)
SUBJECT = "Q3 <report>"
PROPOSED = {"to": "bob@example.com", "subject": SUBJECT, "body": BODY}


async def gated_mail_run(service: Service, owner: Account) -> tuple[str, dict[str, Any]]:
    execution_id = await create_ok(
        service,
        owner.key,
        task(
            taskDescription=f'Send an email to bob@example.com with subject "{SUBJECT}" saying "{BODY}"',
            testMode="with-verification",
            autoDetectCheckpoints=True,
            assignedReviewer=owner.email,
        ),
    )
    record = await wait_for(service, owner.key, execution_id, paused_at(0))
    return execution_id, record["checkpoints"][0]


async def review_mail(service: Service, execution_id: str) -> MailMessage:
    async with service.db.reading() as session:
        (mail,) = await session.scalars(
            sa.select(MailMessage).where(
                MailMessage.execution_id == execution_id, MailMessage.message_key.like("review:%")
            )
        )
    return mail


async def test_every_surface_shows_the_whole_action(service: Service) -> None:
    owner = await account(service, "owner@example.com", "eval:manage")
    execution_id, checkpoint = await gated_mail_run(service, owner)
    assert checkpoint["nextAction"] == {"tool": "send_email", "args": PROPOSED, "editable": True}

    mail = await review_mail(service, execution_id)
    text = mail.text_body
    assert "Tool: send_email" in text
    assert "  to:\n    bob@example.com" in text and f"  subject:\n    {SUBJECT}" in text
    assert f"  body:\n    {BODY}" in text  # in full
    assert "This agent cannot read comments: a rejection ends the run; edit the action to change it." in text
    assert f"/review/inbox/{checkpoint['checkpointId']}" in text
    assert mail.html_body is not None
    html = mail.html_body
    assert "<script>" not in html and "<b>the figures" not in html
    escaped = BODY.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    assert escaped in html and "Q3 &lt;report&gt;" in html
    assert f"/review/inbox/{checkpoint['checkpointId']}" in html

    approve_path = re.search(r"Approve: \S+(/review/link/\S+)", text)
    assert approve_path is not None
    page = await service.client.get(approve_path.group(1))
    body = await page.get_data(as_text=True)
    assert page.status_code == 200
    assert escaped in body and "<script>alert" not in body
    assert "<code>send_email</code>" in body
    assert f"/review/inbox/{checkpoint['checkpointId']}\">open it in your review inbox</a>" in body
    assert "This agent cannot read comments" in body


async def test_the_api_approves_with_edited_arguments_and_refuses_bad_ones(service: Service) -> None:
    owner = await account(service, "owner@example.com", "eval:manage")
    execution_id, checkpoint = await gated_mail_run(service, owner)
    checkpoint_id = checkpoint["checkpointId"]

    refusals = [
        ({"decision": "reject"}, "/comment"),
        ({"decision": "reject", "comment": "   "}, "/comment"),
        ({"decision": "reject", "comment": "no", "editedArgs": {"subject": "x"}}, "/editedArgs"),
        ({"decision": "approve", "editedArgs": {"subject": "a\r\nBcc: eve@example.com"}}, "/editedArgs/subject"),
        ({"decision": "approve", "editedArgs": {"cc": "eve@example.com"}}, "/editedArgs/cc"),
        ({"decision": "approve", "editedArgs": {"to": "a@example.com, b@example.com"}}, "/editedArgs/to"),
        ({"decision": "approve", "editedArgs": {}}, "/editedArgs"),
    ]
    for body, pointer in refusals:
        code, problem = await decide(service, owner.key, execution_id, checkpoint_id, body)
        assert code == 422, (body, problem)
        assert problem["code"] == "validation_failed"
        assert [e["pointer"] for e in problem["errors"]] == [pointer], (body, problem)
    record = await get_status(service, owner.key, execution_id)
    assert record["status"] == "awaiting_review" and record["checkpoints"][0]["decision"] is None

    edits = {"subject": "Q3 report (final)"}
    code, answer = await decide(
        service, owner.key, execution_id, checkpoint_id, {"decision": "approve", "editedArgs": edits}
    )
    assert code == 200, answer
    assert (answer["decision"]["originalArgs"], answer["decision"]["editedArgs"]) == (PROPOSED, edits)
    assert answer["decision"]["via"] == "api"
    record = await wait_for(service, owner.key, execution_id, has_status("completed"))
    (done,) = record["checkpoints"]
    assert done["decision"]["editedArgs"] == edits and done["decision"]["originalArgs"] == PROPOSED
    assert done["attempts"][0]["editedArgs"] == edits
    assert done["nextAction"] == {"tool": "send_email", "args": PROPOSED, "editable": True}  # kept, for the record
    async with service.db.reading() as session:
        (sent,) = await session.scalars(
            sa.select(MailMessage).where(
                MailMessage.execution_id == execution_id, MailMessage.message_key.like("tool:%")
            )
        )
        (call,) = await session.scalars(sa.select(ToolCall).where(ToolCall.execution_id == execution_id))
    assert (sent.recipient, sent.subject, sent.text_body) == ("bob@example.com", edits["subject"], BODY)
    assert (call.args, call.proposed_args) == ({**PROPOSED, **edits}, PROPOSED)


def test_a_multi_line_argument_keeps_its_lines_in_both_mail_bodies() -> None:
    from types import SimpleNamespace

    from review.notify import _env

    body = "Dear <Bob>,\nline two & more\n\nRegards"
    context = {
        "execution": SimpleNamespace(task_name="T", task_description="D", reads_comments=True),
        "checkpoint": SimpleNamespace(stage="S", attempt=1, description="", verification_question="Q?"),
        "next_action": {"tool": "send_email", "instruction": "send it", "editable": True},
        "arguments": [("body", body)],
        "chat_url": "http://x/c",
        "approve_url": "http://x/a",
        "reject_url": "http://x/r",
        "reply_token": "t",
        "hours": 72,
        "inbox_url": "http://x/review/inbox/chk",
        "reads_comments": True,
    }
    html = _env.get_template("checkpoint.html").render(context)
    assert "Dear &lt;Bob&gt;,<br>\nline two &amp; more<br>\n<br>\nRegards" in html
    text = _env.get_template("checkpoint.txt").render(context)
    assert "  body:\n    Dear <Bob>,\n    line two & more\n    \n    Regards\n" in text
    assert "cannot read comments" not in text
