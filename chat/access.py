"""Who may watch an execution's chat, and who may decide its checkpoints there.

Watching: the execution's owner or a reviewer who may decide it, signed in, or anyone holding the chat
link's view token (an HMAC: shared like a document link, checked without a lookup). Deciding: whoever
review's rule allows (review/access.py), signed in with that e-mail, or holding the chat link of a review
mail, whose `rt` is that mail's single-use review token: it decides only the attempt the mail was sent for,
expires with the mail's other links and is spent with them. Everyone else sees the cards' state and no
buttons. The same function answers the page, every socket join and every decision, so a signed-out
session or a changed reviewer takes effect at the next one (and review.decide checks the rule again).
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy.ext.asyncio import AsyncSession

from core.links import chat_view_token_valid
from core.models import Execution, ReviewLink, utcnow
from review.access import may_decide
from review.by_mail import link_state
from review.links import find_link

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
    # Decides through a review mail's chat link: that link's one checkpoint attempt only.
    review_link: ReviewLink | None = None

    @property
    def can_decide(self) -> bool:
        return self.decider is not None


async def usable_review_link(
    session: AsyncSession, secret_key: bytes, execution: Execution, token: str | None
) -> ReviewLink | None:
    """The review mail's chat link behind `token`, while it may still decide; else None."""
    if not token or len(token) > MAX_TOKEN:
        return None
    link = await find_link(session, secret_key, token)
    if link is None or link.purpose != "chat" or link.execution_id != execution.id:
        return None
    state = await link_state(session, link)
    return link if state.status == "usable" else None


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
    link = await usable_review_link(session, secret_key, execution, reviewer_token)
    can_view = owner or reviewer_signed_in or link is not None or view_token_ok(secret_key, execution_id, view_token)
    if not can_view:
        return None
    if reviewer_signed_in and person is not None:
        return Access(execution, True, person.email, via_session=True)
    if link is not None:
        return Access(execution, True, link.reviewer_email, via_session=False, review_link=link)
    return Access(execution, True, None, via_session=False)
