"""Issue 20 on the chat card: the proposed call in full, an approval with edited arguments over Socket.IO, and
the same rules as every channel (a rejection needs a comment; an edit the tool would refuse names the argument).
The offline agent's card says it cannot read comments."""

from __future__ import annotations

import sqlalchemy as sa

from api.app import create_app
from core.db import Database
from core.links import chat_view_token
from core.models import Checkpoint, Decision, Execution
from core.settings import Settings
from tests.agents.test_runner import claim_and_run, new_execution, snapshot
from tests.chat.helpers import REVIEWER, Watcher, sign_in
from tests.chat.test_socket import watcher_on

TASK = 'Send an email to bob@example.com with subject "Draft" saying "<b>Hi</b> Bob"'


async def paused_gated_mail(db: Database, settings: Settings) -> tuple[str, str]:
    exe = await new_execution(db, settings, TASK, test_mode="with-verification", autoDetectCheckpoints=True)
    async with db.transaction() as session:
        await session.execute(sa.update(Execution).where(Execution.id == exe).values(assigned_reviewer=REVIEWER))
    await claim_and_run(db, settings)
    async with db.reading() as session:
        checkpoint_id = await session.scalar(sa.select(Checkpoint.id).where(Checkpoint.execution_id == exe))
    assert checkpoint_id is not None
    return exe, checkpoint_id


async def test_the_card_approves_with_an_edited_subject(
    web: str, worker_db: Database, chat_settings: Settings, watchers: list[Watcher]
) -> None:
    exe, checkpoint_id = await paused_gated_mail(worker_db, chat_settings)
    cookie, csrf = await sign_in(worker_db, chat_settings.secret_key, REVIEWER)
    reviewer = await watcher_on(web, watchers, cookie=cookie)
    joined = await reviewer.join(exe)
    (card,) = [e for e in joined["events"] if e["type"] == "checkpoint.awaiting_review"]
    assert card["payload"]["nextAction"]["args"] == {
        "to": "bob@example.com",
        "subject": "Draft",
        "body": "<b>Hi</b> Bob",
    }
    assert card["payload"]["nextAction"]["editable"] is True and card["payload"]["readsComments"] is False

    no_comment = await reviewer.decide(exe, checkpoint_id, "reject", csrf=csrf, comment="  ")
    assert (no_comment["ok"], no_comment["error"]) == (False, "invalid_decision")
    assert no_comment["message"] == "comment is required to reject: say what should change"
    bad = await reviewer.decide(exe, checkpoint_id, "approve", csrf=csrf, editedArgs={"subject": "a\nb"})
    assert (bad["ok"], bad["argument"]) == (False, "subject")
    assert bad["message"].startswith("subject must be a single line")
    malformed = await reviewer.decide(exe, checkpoint_id, "approve", csrf=csrf, editedArgs=["subject"])
    assert malformed["error"] == "invalid"
    async with worker_db.reading() as session:
        assert list(await session.scalars(sa.select(Decision))) == []

    done = await reviewer.decide(exe, checkpoint_id, "approve", csrf=csrf, editedArgs={"subject": "Final"})
    assert done["ok"] is True, done
    assert (done["decision"]["via"], done["decision"]["editedArgs"]) == ("chat", {"subject": "Final"})
    await reviewer.until_live(exe, card["seq"] + 1)
    (decided,) = [m for m in reviewer.live if m["type"] == "checkpoint.decided"]
    assert decided["payload"]["editedArgs"] == {"subject": "Final"}
    assert decided["payload"]["originalArgs"]["subject"] == "Draft"
    await claim_and_run(worker_db, chat_settings, "worker-2")
    snap = await snapshot(worker_db, exe)
    assert [(m.recipient, m.subject) for m in snap.mails] == [("bob@example.com", "Final")]


async def test_the_rendered_card_shows_every_argument_and_the_offline_note(
    worker_db: Database, chat_settings: Settings
) -> None:
    exe, _ = await paused_gated_mail(worker_db, chat_settings)
    app = create_app(chat_settings, run_worker=False)
    async with app.test_app():
        token = chat_view_token(chat_settings.secret_key, exe)
        response = await app.test_client().get(f"/chat/{exe}?token={token}")
        page = await response.get_data(as_text=True)
    assert response.status_code == 200
    assert "<dt><code>subject</code></dt><dd><pre>Draft</pre></dd>" in page
    assert "<pre>&lt;b&gt;Hi&lt;/b&gt; Bob</pre>" in page  # escaped, in full
    assert '<textarea data-arg="body"' in page
    note = page.split('class="cp-note" data-part="noComments"', 1)[1].split("</p>", 1)[0]
    assert " hidden" not in note.split(">", 1)[0]
    assert "This agent cannot read comments: a rejection ends the run" in note
