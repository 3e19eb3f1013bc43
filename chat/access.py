"""Who may watch an execution's chat, and who may decide its checkpoints there.

Watching: the execution's owner or its assigned reviewer signed in, or anyone holding the chat link's
view token (an HMAC: shared like a document link, checked without a lookup). Deciding: only the assigned
reviewer, signed in with that e-mail or holding a reviewer link from the review e-mail. Everyone else sees
the cards' state and no buttons. The same function answers the page, every socket join and every decision,
so a signed-out session or a changed reviewer takes effect at the next one.
"""

from __future__ import annotations

import hmac
from dataclasses import dataclass

from sqlalchemy.ext.asyncio import AsyncSession

from core.links import chat_view_token_valid, reviewer_chat_token
from core.models import Execution, utcnow
from review.access import may_decide

MAX_TOKEN = 200


@dataclass(frozen=True)
class Person:
    """A signed-in user, as far as the chat cares."""

    user_id: str
    email: str


@dataclass(frozen=True)
class Access:
    execution: Execution
    can_view: bool
    # The e-mail a decision is recorded under; None: this watcher may not decide.
    decider: str | None
    # Decides through a signed-in session, whose CSRF token must come with each decision.
    via_session: bool

    @property
    def can_decide(self) -> bool:
        return self.decider is not None


def reviewer_link_email(secret_key: bytes, execution: Execution, token: str | None) -> str | None:
    """The reviewer a reviewer-link token speaks for, or None.

    The review e-mail's chat link carries `rt`, an HMAC over the execution and its reviewer's address
    (core.links.reviewer_chat_token): checked without a lookup, and void once the reviewer changes.
    """
    reviewer = execution.assigned_reviewer
    if not token or len(token) > MAX_TOKEN or not reviewer:
        return None
    expected = reviewer_chat_token(secret_key, execution.id, reviewer)
    return reviewer if hmac.compare_digest(expected.encode(), token.encode()) else None


def view_token_ok(secret_key: bytes, execution_id: str, token: str | None) -> bool:
    if not token or len(token) > MAX_TOKEN:
        return False
    return chat_view_token_valid(secret_key, execution_id, token)


async def access_to(
    session: AsyncSession,
    execution_id: str,
    *,
    secret_key: bytes,
    person: Person | None,
    view_token: str | None = None,
    reviewer_token: str | None = None,
) -> Access | None:
    """What this watcher may do on this execution; None when it may not even see it (or it does not exist:
    the two look the same from outside, so an id cannot be probed)."""
    if len(execution_id) > 64:
        return None
    execution = await session.get(Execution, execution_id)
    if execution is None:
        return None
    owner = person is not None and person.user_id == execution.user_id
    # Both sides are normalised e-mails (the API normalises assignedReviewer, accounts their own). The rule
    # is review's: the assigned reviewer, or the backup reviewer once the waiting attempt was escalated.
    reviewer_signed_in = person is not None and await may_decide(session, execution, None, person.email, utcnow())
    link_reviewer = reviewer_link_email(secret_key, execution, reviewer_token)
    if link_reviewer is not None and link_reviewer != execution.assigned_reviewer:
        link_reviewer = None  # a link for a reviewer since replaced speaks for no one
    can_view = owner or reviewer_signed_in or link_reviewer is not None or view_token_ok(
        secret_key, execution_id, view_token
    )
    if not can_view:
        return None
    if reviewer_signed_in and person is not None:
        return Access(execution, True, person.email, via_session=True)
    return Access(execution, True, link_reviewer, via_session=False)
