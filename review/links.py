"""Review links: the single-use tokens of a review mail (Approve, Reject, the reply token, and the chat
link's `rt`, which lets the mail's reader decide on the chat card without signing in).

The token itself travels only in the mail; the table keeps HMAC(secret_key, token), so a copy of the
database decides nothing. Each row is bound to one checkpoint, one attempt and one reviewer, and expires
with its mail; the first decision of that attempt spends them all, and so does a change of reviewer.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from dataclasses import dataclass
from datetime import timedelta

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncSession

from core.ids import new_id
from core.models import Checkpoint, ReviewLink, utcnow

PURPOSES = ("approve", "reject", "reply", "chat")
MAX_TOKEN = 100


def link_digest(secret_key: bytes, token: str) -> str:
    return hmac.new(secret_key, f"review-link:{token}".encode(), hashlib.sha256).hexdigest()


@dataclass(frozen=True)
class MintedLinks:
    approve: str
    reject: str
    reply: str
    chat: str


async def mint_links(
    session: AsyncSession, secret_key: bytes, checkpoint: Checkpoint, reviewer: str, hours: float
) -> MintedLinks:
    """Three fresh tokens for this attempt of the checkpoint, stored hashed, in the caller's transaction."""
    now = utcnow()
    tokens: dict[str, str] = {}
    for purpose in PURPOSES:
        # The reply token goes into an address and a subject: short, and lower-case safe (hex).
        token = secrets.token_hex(12) if purpose == "reply" else secrets.token_urlsafe(32)
        tokens[purpose] = token
        session.add(
            ReviewLink(
                id=new_id("rl"),
                token_digest=link_digest(secret_key, token),
                checkpoint_id=checkpoint.id,
                execution_id=checkpoint.execution_id,
                attempt=checkpoint.attempt,
                reviewer_email=reviewer,
                purpose=purpose,
                created_at=now,
                expires_at=now + timedelta(hours=hours),
            )
        )
    return MintedLinks(tokens["approve"], tokens["reject"], tokens["reply"], tokens["chat"])


async def find_link(session: AsyncSession, secret_key: bytes, token: str | None) -> ReviewLink | None:
    if not token or len(token) > MAX_TOKEN:
        return None
    return await session.scalar(sa.select(ReviewLink).where(ReviewLink.token_digest == link_digest(secret_key, token)))


async def use_links(session: AsyncSession, link: ReviewLink) -> bool:
    """Spend the link (compare-and-set on used_at): True for the one caller that spent it.

    Every link of that attempt is spent with it: after an Approve, the Reject link of the same mail is
    as dead as the Approve link itself."""
    now = utcnow()
    spent = await session.execute(
        sa.update(ReviewLink)
        .where(ReviewLink.id == link.id, ReviewLink.used_at.is_(None))
        .values(used_at=now),
        execution_options={"synchronize_session": False},
    )
    if spent.rowcount != 1:  # type: ignore[attr-defined]
        return False
    await session.execute(
        sa.update(ReviewLink)
        .where(
            ReviewLink.checkpoint_id == link.checkpoint_id,
            ReviewLink.attempt == link.attempt,
            ReviewLink.used_at.is_(None),
        )
        .values(used_at=now),
        execution_options={"synchronize_session": False},
    )
    return True


async def spend_links_of_others(session: AsyncSession, execution_id: str, reviewer: str | None) -> int:
    """Spend every unspent link of the execution made for anyone but `reviewer` (the one now named).

    In the reassignment's own transaction: there is no moment when both the old and the new reviewer's
    links decide. Returns how many were spent."""
    spent = await session.execute(
        sa.update(ReviewLink)
        .where(
            ReviewLink.execution_id == execution_id,
            ReviewLink.used_at.is_(None),
            *([ReviewLink.reviewer_email != reviewer] if reviewer else []),
        )
        .values(used_at=utcnow()),
        execution_options={"synchronize_session": False},
    )
    return int(spent.rowcount)  # type: ignore[attr-defined]
