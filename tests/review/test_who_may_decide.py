"""Who may decide, on every channel: channel by actor → the exact answer, and whether a decision was written.

Every case starts from the same story: an execution of the owner, reviewed first by Andy, who got the review
mail; the owner then PATCHed the reviewer to Rita, who got a mail of her own; Bob is the backup reviewer
(escalated or not). Each channel is driven the way its users drive it: the API and the CLI over HTTP with an
API key, the inbox with a signed-in session and its CSRF token, the chat over Socket.IO, the mail's links and
the mail's reply through their own pages and the SMTP listener.
"""

from __future__ import annotations

import asyncio
import email.message
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import aiosmtplib
import httpx
import pytest
import sqlalchemy as sa
from click.testing import CliRunner
from vouch_client.cli import checkpoints as checkpoints_cli

from core.ids import new_id
from core.links import chat_view_token
from core.models import Checkpoint, Decision, Execution, MailMessage, ReviewLink, ReviewTimer, utcnow
from core.settings import Settings
from review.inbound import InboundListener
from review.notify import checkpoint_awaiting, reply_address
from review.timers import process_due_timers
from tests.api.helpers import account, decision_path
from tests.api.rows import insert_execution
from tests.chat.helpers import Watcher, sign_in
from tests.conftest import Account, Service, bearer
from tests.review.mail_support import REPLY_TAG, chat_link_in, links_in
from tests.support.live import live_server
from tests.support.ports import free_port
from tests.support.processes import run_vouch
from tests.web.browser import Browser

OWNER, RITA, ANDY, BOB, XAVI = (
    "olga@example.com", "rita@example.com", "andy@example.com", "bob@example.com", "xavi@example.com",
)  # fmt: skip
ORIGIN = "https://vouch.test"
ACTION = {
    "tool": "send_email",
    "args": {"to": "press@acme.example", "subject": "Launch", "body": "We launch today."},
    "instruction": "send an e-mail to press@acme.example with subject 'Launch'",
    "editable": False,
}


@dataclass
class Person:
    account: Account
    cookie: str
    csrf: str


@dataclass
class Tokens:
    approve: str  # the Approve link's path
    reply: str
    chat: str  # the chat link's `rt`


@dataclass
class Case:
    execution_id: str
    checkpoint_id: str
    andy: Tokens  # from the mail sent before the PATCH
    rita: Tokens  # from the mail the PATCH sent
    # Andy opened his Approve link before the PATCH: the browser and the form's CSRF token he holds.
    andy_browser: Browser
    andy_csrf: str


@dataclass
class World:
    service: Service
    base: str
    smtp_port: int
    people: dict[str, Person]


async def _person(service: Service, email: str) -> Person:
    """A user with an API key and a signed-in browser session (its cookie and CSRF token)."""
    acct = await account(service, email, "eval:manage")
    cookie, csrf = await sign_in(service.db, service.settings.secret_key, email)
    return Person(acct, cookie, csrf)


def _tokens(mail: MailMessage) -> Tokens:
    reply = REPLY_TAG.search(mail.subject)
    assert reply is not None
    return Tokens(links_in(mail.text_body)["approve"], reply.group(1), chat_link_in(mail.text_body)[1])


async def _mail(service: Service, execution_id: str, recipient: str) -> MailMessage:
    async with service.db.reading() as session:
        (mail,) = await session.scalars(
            sa.select(MailMessage).where(
                MailMessage.execution_id == execution_id,
                MailMessage.recipient == recipient,
                MailMessage.message_key.like("review:%"),
            )
        )
        return mail


async def new_case(world: World, *, escalated: bool) -> Case:
    service = world.service
    owner = world.people[OWNER].account
    execution_id, (checkpoint_id,) = await insert_execution(
        service.db, owner, reviewer=ANDY, checkpoints=1, awaiting=True
    )
    async with service.db.transaction() as session:
        await session.execute(sa.update(Execution).where(Execution.id == execution_id).values(backup_reviewer=BOB))
        checkpoint = await session.get_one(Checkpoint, checkpoint_id)
        # As the runner's pause leaves it: the action the checkpoint holds back, on the row and in the mail.
        checkpoint.next_action = ACTION
        await checkpoint_awaiting(session, service.settings, execution_id, checkpoint, ACTION)
        if escalated:
            session.add(
                ReviewTimer(
                    id=new_id("tmr"),
                    execution_id=execution_id,
                    checkpoint_id=checkpoint_id,
                    attempt=1,
                    kind="escalation",
                    due_at=utcnow() - timedelta(seconds=1),
                    fired_at=utcnow(),
                )
            )
    andy = _tokens(await _mail(service, execution_id, ANDY))
    andy_browser = Browser(service.app)
    opened = await andy_browser.get(andy.approve)
    assert opened.status == 200
    patched = await service.client.patch(
        f"/api/eval/executions/{execution_id}", json={"assignedReviewer": RITA}, headers=bearer(owner.key)
    )
    assert patched.status_code == 200, await patched.get_json()
    rita = _tokens(await _mail(service, execution_id, RITA))
    return Case(execution_id, checkpoint_id, andy, rita, andy_browser, opened.csrf())


async def decisions(world: World, case: Case) -> list[tuple[str, str]]:
    async with world.service.db.reading() as session:
        rows = await session.execute(
            sa.select(Decision.decided_by, Decision.via).where(Decision.checkpoint_id == case.checkpoint_id)
        )
        return [(row.decided_by, row.via) for row in rows]


# A channel: (world, case, who) → the answer, in a short stable form.
Channel = Callable[[World, Case, str | None], Awaitable[str]]


async def by_api(world: World, case: Case, who: str | None) -> str:
    headers = bearer(world.people[who].account.key) if who else {}
    response = await world.service.client.post(
        decision_path(case.execution_id, case.checkpoint_id), json={"decision": "approve"}, headers=headers
    )
    body = await response.get_json()
    return f"{response.status_code} {body.get('code', '')}".strip()


async def by_cli(world: World, case: Case, who: str | None) -> str:
    key = world.people[who].account.key if who else "svc_eval_" + "0" * 32
    arguments = ["--url", world.base, "--api-key", key, "decide", case.execution_id, case.checkpoint_id, "approve"]
    result = await asyncio.to_thread(CliRunner().invoke, checkpoints_cli, arguments)
    words = result.output.strip().split(": ")
    return f"exit {result.exit_code}" + (f" {words[1]}" if result.exit_code and len(words) > 2 else "")


async def by_inbox(world: World, case: Case, who: str | None) -> str:
    """The detail page (status, whether it offers the form), the inbox list, then the form's POST."""
    person = world.people.get(who or "")
    browser = Browser(world.service.app, cookies=dict([person.cookie.split("=", 1)]) if person else {})
    page = await browser.get(f"/review/inbox/{case.checkpoint_id}")
    listed = case.checkpoint_id in (await browser.get("/review/inbox")).text
    form = {"csrf_token": person.csrf if person else "", "decision": "approve", "attempt": "1", "comment": ""}
    posted = await browser.post(f"/review/inbox/{case.checkpoint_id}", form)
    offered = 'name="decision"' in page.text
    return f"page {page.status}{' form' if offered else ''}{' listed' if listed else ''}, post {posted.status}"


async def _chat(world: World, case: Case, who: str | None, *, detail: bool = False, **extra: Any) -> str:
    watcher = Watcher()
    person = world.people.get(who or "")
    view = chat_view_token(world.service.settings.secret_key, case.execution_id)
    try:
        await watcher.connect(
            world.base,
            auth={"executionId": case.execution_id, "token": view},
            cookie=person.cookie if person else None,
            origin=ORIGIN,
        )
        joined: dict[str, Any] = await watcher.client.call(
            "join_execution",
            {"executionId": case.execution_id, "token": view, "afterSeq": 0, **extra},
            namespace="/chat",
            timeout=15,
        )
        answer = await watcher.decide(
            case.execution_id, case.checkpoint_id, "approve", token=view, csrf=person.csrf if person else None, **extra
        )
    finally:
        await watcher.close()
    buttons = "buttons" if joined.get("canDecide") else "no buttons"
    said = f" ({answer.get('message')})" if detail and not answer.get("ok") else ""
    return f"{buttons}, " + ("ok" if answer.get("ok") else str(answer.get("error"))) + said


async def by_chat(world: World, case: Case, who: str | None) -> str:
    return await _chat(world, case, who)


async def by_chat_link(world: World, case: Case, who: str | None) -> str:
    """The review mail's chat link: `who` is whose mail it came from (no session)."""
    tokens = {ANDY: case.andy, RITA: case.rita}.get(who or "")
    return await _chat(world, case, None, reviewerToken=tokens.chat if tokens else "not-a-token")


async def by_mail_link(world: World, case: Case, who: str | None) -> str:
    """The Approve link of `who`'s mail, opened and confirmed in a browser that is not signed in."""
    tokens = {ANDY: case.andy, RITA: case.rita}.get(who or "")
    path = tokens.approve if tokens else "/review/link/not-a-token"
    browser = case.andy_browser if who == ANDY else Browser(world.service.app)
    page = await browser.get(path)
    csrf = case.andy_csrf if who == ANDY else page.csrf() if page.status == 200 else ""
    posted = await browser.post(path, {"csrf_token": csrf, "comment": ""})
    return f"page {page.status}, post {posted.status}"


async def by_reply(world: World, case: Case, who: str | None) -> str:
    """A reply from `who` carrying Rita's reply token, or Andy's own token when `who` is Andy."""
    token = (case.andy if who == ANDY else case.rita).reply
    sender = who or "nobody@example.net"
    message = email.message.EmailMessage()
    message["From"], message["To"] = sender, reply_address(world.service.settings, token)
    message["Subject"] = f"Re: review [vouch:{token}]"
    message.set_content("approve\n")
    recipient = str(message["To"])
    await aiosmtplib.send(message, hostname="127.0.0.1", port=world.smtp_port, sender=sender, recipients=[recipient])
    return "sent"  # the listener answers 250 whatever it did: the decision rows tell


SIGNED_OUT = None
ACTORS = {
    "assigned reviewer": RITA,
    "reviewer replaced by a PATCH": ANDY,
    "backup before escalation": BOB,
    "backup after escalation": BOB,
    "owner, not the reviewer": OWNER,
    "another user (valid key or session and CSRF)": XAVI,
    "signed out": SIGNED_OUT,
}

# channel → actor → (answer, who decided or None). An actor missing from a channel holds nothing it could use
# there: the backup reviewer gets no mail token (see test_the_escalation_mail_carries_nothing_that_decides).
EXPECTED: dict[str, dict[str, tuple[str, str | None]]] = {
    "api": {
        "assigned reviewer": ("200", RITA),
        "reviewer replaced by a PATCH": ("404 not_found", None),
        "backup before escalation": ("404 not_found", None),
        "backup after escalation": ("200", BOB),
        "owner, not the reviewer": ("403 not_assigned_reviewer", None),
        "another user (valid key or session and CSRF)": ("404 not_found", None),
        "signed out": ("401 missing_api_key", None),
    },
    "cli": {
        "assigned reviewer": ("exit 0", RITA),
        "reviewer replaced by a PATCH": ("exit 5 not_found", None),
        "backup before escalation": ("exit 5 not_found", None),
        "backup after escalation": ("exit 0", BOB),
        "owner, not the reviewer": ("exit 5 not_assigned_reviewer", None),
        "another user (valid key or session and CSRF)": ("exit 5 not_found", None),
        "signed out": ("exit 5 invalid_api_key", None),
    },
    "inbox": {
        "assigned reviewer": ("page 200 form listed, post 303", RITA),
        "reviewer replaced by a PATCH": ("page 404, post 404", None),
        # Named on the execution, so the page shows (history links there), but without the form.
        "backup before escalation": ("page 200, post 404", None),
        "backup after escalation": ("page 200 form listed, post 303", BOB),
        "owner, not the reviewer": ("page 404, post 404", None),
        "another user (valid key or session and CSRF)": ("page 404, post 404", None),
        "signed out": ("page 303, post 303", None),
    },
    "chat": {
        "assigned reviewer": ("buttons, ok", RITA),
        "reviewer replaced by a PATCH": ("no buttons, not_assigned_reviewer", None),
        "backup before escalation": ("no buttons, not_assigned_reviewer", None),
        "backup after escalation": ("buttons, ok", BOB),
        "owner, not the reviewer": ("no buttons, not_assigned_reviewer", None),
        "another user (valid key or session and CSRF)": ("no buttons, not_assigned_reviewer", None),
        "signed out": ("no buttons, not_assigned_reviewer", None),
    },
    "chat link from the review mail": {
        "assigned reviewer": ("buttons, ok", RITA),
        "reviewer replaced by a PATCH": ("no buttons, not_assigned_reviewer", None),
        "signed out": ("no buttons, not_assigned_reviewer", None),
    },
    "mail link": {
        "assigned reviewer": ("page 200, post 200", RITA),
        "reviewer replaced by a PATCH": ("page 410, post 410", None),
        "signed out": ("page 404, post 404", None),
    },
    "mail reply": {
        "assigned reviewer": ("sent", RITA),
        "reviewer replaced by a PATCH": ("sent", None),
        "another user (valid key or session and CSRF)": ("sent", None),
    },
}
CHANNELS: dict[str, Channel] = {
    "api": by_api,
    "cli": by_cli,
    "inbox": by_inbox,
    "chat": by_chat,
    "chat link from the review mail": by_chat_link,
    "mail link": by_mail_link,
    "mail reply": by_reply,
}


@pytest.fixture
def settings(settings: Settings) -> Iterator[Settings]:
    # API keys cached for the whole test: `vouch users disable` runs beside the server on no bus it hears, so a
    # key it cached before keeps authenticating (the documented VOUCH_AUTH_CACHE_SECONDS), and deciding must
    # still be refused then; a short cache would make that window a race with the command's start-up.
    yield settings.with_changes(
        inbound_smtp=f"127.0.0.1:{free_port()}", mail_from="Vouch <vouch@vouch.test>", auth_cache_seconds=3600.0
    )


@pytest.fixture
async def world(api_only: Service) -> AsyncIterator[World]:
    people = {email: await _person(api_only, email) for email in (OWNER, RITA, ANDY, BOB, XAVI)}
    listener = InboundListener(api_only.settings, api_only.db)
    await listener.start()
    try:
        with live_server(api_only.settings, run_worker=False) as base:
            yield World(api_only, base, listener.port, people)
    finally:
        await listener.stop()


async def test_who_may_decide_on_every_channel(world: World, subtests: pytest.Subtests) -> None:
    assert set(EXPECTED) == set(CHANNELS)
    for channel, rows in EXPECTED.items():
        for actor, (answer, decider) in rows.items():
            with subtests.test(msg=f"{channel} by {actor}"):
                case = await new_case(world, escalated=actor == "backup after escalation")
                got = await CHANNELS[channel](world, case, ACTORS[actor])
                written = await decisions(world, case)
                assert (got, written) == (answer, [(decider, _via(channel))] if decider else [])


def _via(channel: str) -> str:
    return {"cli": "api", "inbox": "web", "chat link from the review mail": "chat", "mail link": "email",
            "mail reply": "email"}.get(channel, channel)  # fmt: skip


# A disabled reviewer (`vouch users disable`, run beside the server after their key was cached and their mails
# were sent) decides on no channel; the backup, escalated, still does. The signed-in channels end with the session.
DISABLED: dict[str, str] = {
    "api": "404 not_found",
    "cli": "exit 5 not_found",
    "inbox": "page 303, post 303",
    "chat": "no buttons, not_assigned_reviewer",
    "chat link from the review mail": "no buttons, not_assigned_reviewer",
    "mail link": "page 410, post 403",  # a fresh browser: no form, so no form token (one opened before: below)
    "mail reply": "sent",
}
SIGNED_IN = ("api", "cli", "inbox", "chat")


async def _cache_keys(world: World, *emails: str) -> None:
    """One authenticated request with each key on both servers (the test app and the live one): cached."""
    async with httpx.AsyncClient(base_url=world.base) as live:
        for email in emails:
            headers = bearer(world.people[email].account.key)
            assert (await world.service.client.get("/api/eval/status/exe_none", headers=headers)).status_code == 404
            assert (await live.get("/api/eval/status/exe_none", headers=headers)).status_code == 404


def _disable(world: World, email: str) -> None:
    done = run_vouch(world.service.settings, "users", "disable", email)
    assert done.returncode == 0, done.stderr


async def test_a_disabled_reviewer_decides_on_no_channel(
    world: World, subtests: pytest.Subtests, caplog: pytest.LogCaptureFixture
) -> None:
    assert set(DISABLED) == set(CHANNELS)
    await _cache_keys(world, RITA, BOB)
    cases = {channel: await new_case(world, escalated=True) for channel in CHANNELS}
    # For the disabled backup over the API, made now: once Rita is disabled, no run can be given her as reviewer.
    spare = await new_case(world, escalated=True)
    opened_before, approve = Browser(world.service.app), cases["mail link"].rita.approve
    form = await opened_before.get(approve)
    assert form.status == 200
    _disable(world, RITA)
    for channel, answer in DISABLED.items():
        with subtests.test(msg=f"{channel} by the disabled reviewer"):
            case = cases[channel]
            with caplog.at_level(logging.INFO, logger="review.inbound"):
                got = await CHANNELS[channel](world, case, RITA)
            assert (got, await decisions(world, case)) == (answer, [])
    with subtests.test(msg="the mail link's form, opened before, posts to the page that says why"):
        page = await opened_before.post(approve, {"csrf_token": form.csrf(), "comment": ""})
        assert page.status == 410 and f"{RITA} has been disabled" in page.text and "/review/link/" not in page.text
        assert await decisions(world, cases["mail link"]) == []
    with subtests.test(msg="the reply is logged with why"):
        assert any("ignored: the reviewer's account is disabled" in r.getMessage() for r in caplog.records)
    with subtests.test(msg="the escalated backup still decides"):
        assert await by_inbox(world, cases["api"], BOB) == "page 200 form listed, post 303"
        assert await decisions(world, cases["api"]) == [(BOB, "web")]
    # A disabled backup, escalated, is no longer a reviewer either.
    _disable(world, BOB)
    for channel in SIGNED_IN:
        with subtests.test(msg=f"{channel} by the disabled backup"):
            case = cases[channel] if channel != "api" else spare
            assert (await CHANNELS[channel](world, case, BOB), await decisions(world, case)) == (DISABLED[channel], [])


async def test_the_replaced_reviewer_is_told_nothing_and_the_new_one_everything(world: World) -> None:
    """The PATCH spends Andy's links in its own transaction and mails Rita working ones; Andy's link pages say why."""
    case = await new_case(world, escalated=False)
    browser = Browser(world.service.app)
    page = await browser.get(case.andy.approve)
    assert page.status == 410 and "no longer decides" in page.text and "changed who reviews it" in page.text
    # Nothing on that page decides: no rt, no Approve or Reject link, only the shared view link.
    assert "rt=" not in page.text and "/review/link/" not in page.text
    mail = await _mail(world.service, case.execution_id, RITA)
    assert mail.subject.startswith("Review needed: Inserted — stage 0")
    # The new reviewer sees the exact action the checkpoint holds back, as the first reviewer did.
    assert "press@acme.example" in mail.text_body and "We launch today." in mail.text_body
    rita_page = await browser.get(case.rita.approve)
    assert rita_page.status == 200 and RITA in rita_page.text


async def test_a_reviewer_named_again_gets_fresh_links(world: World) -> None:
    case = await new_case(world, escalated=False)
    owner = world.people[OWNER].account
    back = await world.service.client.patch(
        f"/api/eval/executions/{case.execution_id}", json={"assignedReviewer": ANDY}, headers=bearer(owner.key)
    )
    assert back.status_code == 200
    async with world.service.db.reading() as session:
        mails = list(
            await session.scalars(
                sa.select(MailMessage)
                .where(MailMessage.execution_id == case.execution_id, MailMessage.recipient == ANDY)
                .order_by(MailMessage.created_at)
            )
        )
    assert len(mails) == 2
    fresh = _tokens(mails[1])
    assert (await Browser(world.service.app).get(case.andy.approve)).status == 410
    assert (await Browser(world.service.app).get(case.rita.approve)).status == 410
    again = Case(case.execution_id, case.checkpoint_id, fresh, fresh, Browser(world.service.app), "")
    assert await by_mail_link(world, again, RITA) == "page 200, post 200"
    assert await decisions(world, case) == [(ANDY, "email")]


async def test_the_escalation_mail_carries_nothing_that_decides(api_only: Service) -> None:
    """The backup reviewer decides signed in (inbox, chat, API): their mail holds no token."""

    owner = await account(api_only, OWNER, "eval:manage")
    execution_id, (checkpoint_id,) = await insert_execution(api_only.db, owner, reviewer=RITA, checkpoints=1,
                                                            awaiting=True)  # fmt: skip
    async with api_only.db.transaction() as session:
        await session.execute(sa.update(Execution).where(Execution.id == execution_id).values(backup_reviewer=BOB))
        session.add(ReviewTimer(id=new_id("tmr"), execution_id=execution_id, checkpoint_id=checkpoint_id, attempt=1,
                                kind="escalation", due_at=utcnow()))  # fmt: skip
    assert await process_due_timers(api_only.db, api_only.settings) == 1
    async with api_only.db.reading() as session:
        (mail,) = await session.scalars(sa.select(MailMessage).where(MailMessage.recipient == BOB))
    assert "/review/inbox/" + checkpoint_id in mail.text_body
    assert "/review/link/" not in mail.text_body and "rt=" not in mail.text_body and "[vouch:" not in mail.subject


async def test_a_reply_is_logged_with_why_it_did_not_decide(world: World, caplog: pytest.LogCaptureFixture) -> None:
    case = await new_case(world, escalated=False)
    with caplog.at_level(logging.INFO, logger="review.inbound"):
        await by_reply(world, case, ANDY)
    assert any("ignored: the review is reassigned" in record.getMessage() for record in caplog.records)


async def test_who_may_not_decide_is_told_so_before_the_state_of_the_checkpoint(world: World) -> None:
    """Someone without the right learns nothing of the checkpoint's state (decided, by whom) from a refusal."""
    case = await new_case(world, escalated=False)
    assert await by_api(world, case, RITA) == "200"
    assert await by_api(world, case, OWNER) == "403 not_assigned_reviewer"
    assert await by_cli(world, case, OWNER) == "exit 5 not_assigned_reviewer"
    assert await by_chat(world, case, OWNER) == "no buttons, not_assigned_reviewer"
    assert await _chat(world, case, None, detail=True) == (
        "no buttons, not_assigned_reviewer (Only the assigned reviewer may decide this checkpoint.)"
    )
    assert await by_api(world, case, RITA) == "409 already_decided"
    assert await decisions(world, case) == [(RITA, "api")]


async def test_an_expired_reply_token_does_not_decide(world: World, caplog: pytest.LogCaptureFixture) -> None:
    case = await new_case(world, escalated=False)
    async with world.service.db.transaction() as session:
        await session.execute(
            sa.update(ReviewLink)
            .where(ReviewLink.execution_id == case.execution_id)
            .values(expires_at=utcnow() - timedelta(seconds=1))
        )
    with caplog.at_level(logging.INFO, logger="review.inbound"):
        await by_reply(world, case, RITA)
    assert any("ignored: the review is expired" in record.getMessage() for record in caplog.records)
    assert await decisions(world, case) == []
