"""A review mail's tokens obey one set of rules: Approve and Reject links, the reply token and the chat link's
`rt` each expire with the mail, decide only the attempt the mail was sent for, are spent by that attempt's
decision on any channel and by a change of reviewer; and no page reached through a link hands out an `rt`."""

from __future__ import annotations

from datetime import timedelta

import sqlalchemy as sa

from chat.access import access_to
from core.accounts import user_by_email
from core.models import Checkpoint, Decision, Execution, ReviewLink, utcnow
from core.vocabulary import Channel
from review.by_mail import decide_by_link
from review.links import find_link
from review.notify import checkpoint_awaiting
from tests.api.helpers import account, add_key, decision_path
from tests.api.rows import insert_execution
from tests.conftest import Account, Service, bearer
from tests.review.mail_support import chat_link_in, links_in, review_mail
from tests.web.browser import Browser

OWNER, FIRST, SECOND = "owner@example.com", "first@example.com", "second@example.com"


async def waiting(service: Service) -> tuple[Account, Account, str, str]:
    """An execution waiting at its checkpoint for FIRST, who has been sent the review mail."""
    owner = await known(service, OWNER)
    first = await known(service, FIRST)
    execution_id, (checkpoint_id,) = await insert_execution(
        service.db, owner, reviewer=FIRST, checkpoints=1, awaiting=True
    )
    async with service.db.transaction() as session:
        checkpoint = await session.get_one(Checkpoint, checkpoint_id)
        await checkpoint_awaiting(session, service.settings, execution_id, checkpoint, None)
    return owner, first, execution_id, checkpoint_id


async def known(service: Service, email: str) -> Account:
    """An account of `email` with a fresh key: the user is made on first use."""
    async with service.db.reading() as session:
        user = await user_by_email(session, email)
    if user is None:
        return await account(service, email, "eval:manage")
    key_id, secret = await add_key(service, email, "eval:manage")
    return Account(email, user.id, secret, key_id)


async def decider(service: Service, execution_id: str, rt: str) -> str | None:
    async with service.db.reading() as session:
        found = await access_to(
            session, execution_id, secret_key=service.settings.secret_key, person=None, reviewer_token=rt
        )
        return found.decider if found is not None else None


async def decided(service: Service, checkpoint_id: str) -> list[tuple[str, str]]:
    async with service.db.reading() as session:
        rows = await session.execute(
            sa.select(Decision.decided_by, Decision.via).where(Decision.checkpoint_id == checkpoint_id)
        )
        return [(row.decided_by, row.via) for row in rows]


async def test_the_replaced_reviewers_open_link_does_not_decide(api_only: Service) -> None:
    owner, _, execution_id, checkpoint_id = await waiting(api_only)
    approve = links_in((await review_mail(api_only, execution_id)).text_body)["approve"]
    browser = Browser(api_only.app)
    page = await browser.get(approve)
    assert page.status == 200
    patched = await api_only.client.patch(
        f"/api/eval/executions/{execution_id}", json={"assignedReviewer": SECOND}, headers=bearer(owner.key)
    )
    assert patched.status_code == 200
    posted = await browser.post(approve, {"csrf_token": page.csrf(), "comment": ""})
    assert posted.status == 410 and "no longer decides" in posted.text, posted.text
    assert await decided(api_only, checkpoint_id) == []


async def test_the_chat_link_expires_with_the_mail(api_only: Service) -> None:
    _, _, execution_id, _ = await waiting(api_only)
    _, rt = chat_link_in((await review_mail(api_only, execution_id)).text_body)
    assert await decider(api_only, execution_id, rt) == FIRST
    async with api_only.db.transaction() as session:
        await session.execute(
            sa.update(ReviewLink)
            .where(ReviewLink.execution_id == execution_id)
            .values(expires_at=utcnow() - timedelta(seconds=1))
        )
    assert await decider(api_only, execution_id, rt) is None


async def test_the_chat_link_is_spent_by_its_attempts_decision_on_another_channel(api_only: Service) -> None:
    _, first, execution_id, checkpoint_id = await waiting(api_only)
    _, rt = chat_link_in((await review_mail(api_only, execution_id)).text_body)
    response = await api_only.client.post(
        decision_path(execution_id, checkpoint_id),
        json={"decision": "reject", "comment": "shorter please"},
        headers=bearer(first.key),
    )
    assert response.status_code == 200
    # The checkpoint went back to pending for attempt 2: the attempt-1 mail's chat link decides nothing more,
    # even when attempt 2 waits (its own mail brings its own link).
    assert await decider(api_only, execution_id, rt) is None
    async with api_only.db.transaction() as session:
        await session.execute(
            sa.update(Checkpoint).where(Checkpoint.id == checkpoint_id).values(status="awaiting_review")
        )
        await session.execute(
            sa.update(Execution).where(Execution.id == execution_id).values(status="awaiting_review")
        )
    assert await decider(api_only, execution_id, rt) is None


async def test_no_page_of_a_spent_or_expired_link_hands_out_a_chat_token(api_only: Service) -> None:
    _, _, execution_id, _ = await waiting(api_only)
    mail = await review_mail(api_only, execution_id)
    approve = links_in(mail.text_body)["approve"]
    _, rt = chat_link_in(mail.text_body)
    browser = Browser(api_only.app)
    usable = await browser.get(approve)
    assert usable.status == 200 and "/chat/" in usable.text and rt not in usable.text and "rt=" not in usable.text
    async with api_only.db.transaction() as session:
        await session.execute(
            sa.update(ReviewLink)
            .where(ReviewLink.execution_id == execution_id)
            .values(expires_at=utcnow() - timedelta(seconds=1))
        )
    expired = await browser.get(approve)
    assert expired.status == 410 and "has expired" in expired.text
    assert "/chat/" in expired.text and "rt=" not in expired.text


async def test_the_chat_link_decides_as_its_reviewer_once(api_only: Service) -> None:
    """Over the chat's own decision path (tests/review/test_who_may_decide.py drives the socket); here the
    link is spent with the rest of its mail, so the mail's Approve link then says it was decided."""
    _, _, execution_id, checkpoint_id = await waiting(api_only)
    mail = await review_mail(api_only, execution_id)
    _, rt = chat_link_in(mail.text_body)
    async with api_only.db.transaction() as session:
        link = await find_link(session, api_only.settings.secret_key, rt)
        assert link is not None and link.purpose == "chat"
        await decide_by_link(session, link, "approve", comment="", remote_addr=None, via=Channel.CHAT)
    assert await decided(api_only, checkpoint_id) == [(FIRST, "chat")]
    assert await decider(api_only, execution_id, rt) is None
    page = await Browser(api_only.app).get(links_in(mail.text_body)["approve"])
    assert page.status == 410 and f"by {FIRST} via chat" in page.text


async def test_a_chat_link_speaks_only_for_its_own_execution_and_as_a_chat_link(api_only: Service) -> None:
    _, _, execution_id, _ = await waiting(api_only)
    mail = await review_mail(api_only, execution_id)
    _, rt = chat_link_in(mail.text_body)
    approve_token = links_in(mail.text_body)["approve"].rsplit("/", 1)[1]
    _, _, other_execution, _ = await waiting(api_only)
    assert await decider(api_only, execution_id, rt) == FIRST
    # The mail's Approve token is no chat token, and a chat token is good on its own execution only.
    assert await decider(api_only, execution_id, approve_token) is None
    assert await decider(api_only, other_execution, rt) is None
