"""Deciding through a review mail's token: the link pages, the reply listener and the mail's chat link all
end here.

What a token's state is (usable, expired, spent, superseded by another decision or another reviewer) is
worked out in one place, so a link page, a reply and the chat tell the same story.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncSession

from core.models import Checkpoint, Decision, Execution, ReviewLink, utcnow
from core.vocabulary import Channel, CheckpointOrigin
from review.access import disabled
from review.decision_errors import DecisionError
from review.decision_records import DecisionRecord
from review.decisions import Verdict, decide
from review.links import use_links


@dataclass(frozen=True)
class LinkState:
    link: ReviewLink
    checkpoint: Checkpoint
    execution: Execution
    # usable | decided | disabled (an operator disabled the reviewer's account) | reassigned (the owner named
    # another reviewer since the mail) | used | expired | closed (the run ended or moved past this attempt)
    status: str
    decision: DecisionRecord | None


async def link_state(session: AsyncSession, link: ReviewLink) -> LinkState:
    checkpoint = await session.get_one(Checkpoint, link.checkpoint_id)
    execution = await session.get_one(Execution, link.execution_id)
    row = await session.scalar(
        sa.select(Decision).where(Decision.checkpoint_id == link.checkpoint_id, Decision.attempt == link.attempt)
    )
    decision = DecisionRecord.of(row) if row is not None else None
    if decision is not None:
        status = "decided"
    elif await disabled(session, link.reviewer_email):
        status = "disabled"
    elif link.reviewer_email != execution.assigned_reviewer or link.used_at is not None:
        # Spent without a decision of its attempt: only a change of reviewer does that (review/reassign.py).
        status = "reassigned"
    elif link.used_at is not None:
        status = "used"
    elif link.expires_at <= utcnow():
        status = "expired"
    elif (
        checkpoint.attempt != link.attempt
        or checkpoint.status != "awaiting_review"
        # A grade (issue 23) is asked after the run ended: the run does not wait for it, its verdict does.
        or (execution.status != "awaiting_review" and checkpoint.origin != CheckpointOrigin.GRADE)
    ):
        status = "closed"
    else:
        status = "usable"
    return LinkState(link, checkpoint, execution, status, decision)


class LinkRefused(Exception):
    """The token cannot decide; `state` says why (shown to the person as it is)."""

    def __init__(self, state: LinkState, message: str = "") -> None:
        super().__init__(message or state.status)
        self.state = state


async def decide_by_link(
    session: AsyncSession,
    link: ReviewLink,
    verdict: Verdict,
    *,
    comment: str,
    remote_addr: str | None,
    via: Channel = Channel.EMAIL,
    edited_args: dict[str, Any] | None = None,
    rating: Any = None,
    labels: Any = None,
) -> DecisionRecord:
    """Spend the link and decide as its reviewer, on the attempt it was made for; LinkRefused if the link
    may not decide. `via` is "chat" for the mail's chat link, "email" for its buttons and a reply.

    The caller's transaction holds both: a refused decision leaves the link unspent."""
    state = await link_state(session, link)
    if state.status != "usable":
        raise LinkRefused(state)
    if not await use_links(session, link):
        raise LinkRefused(await link_state(session, link))
    try:
        return await decide(
            session,
            link.checkpoint_id,
            verdict,
            by=link.reviewer_email,
            via=via,
            comment=comment,
            remote_addr=remote_addr,
            attempt=link.attempt,
            edited_args=edited_args,
            rating=rating,
            labels=labels,
        )
    except DecisionError as exc:
        raise LinkRefused(state, str(exc)) from exc
