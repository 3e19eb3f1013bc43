"""Open sign-up, proven by mail: a sign-up is a request, and the account exists only once the link mailed to
the address is used with the password chosen at sign-up.

Why no account before that: everything in Vouch that is shown by address (the dev mailbox, the review inbox,
the reviewer's chat) trusts that a user's e-mail is theirs. An unconfirmed account would need every one of
those places to check a flag; with no account there is nothing to check, and nothing to sign in to.

- The token travels only in the mail; the row keeps HMAC(secret_key, token) (`token_digest`, as sessions do).
- It works once (compare-and-set on `used_at`) and until `expires_at` (VOUCH_SIGNUP_LINK_HOURS).
- Opening the link confirms nothing (mail scanners fetch links): its page's form, with the CSRF token and the
  password chosen at sign-up, does. The password also means that the owner of a mailbox who is sent a link
  for a sign-up they did not make cannot be led to confirm it, and so hand their address to its maker.
- Each sign-up is its own request with its own password: a second sign-up for the same address neither
  changes nor takes over the first; the first link used makes the account, and the others die with it.
- A sign-up for an address that already has an account gets the same answer as any other; the address is
  mailed that it has an account, with no link. Only its owner learns anything.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from datetime import datetime, timedelta

import sqlalchemy as sa
from quart import render_template
from sqlalchemy.ext.asyncio import AsyncSession

from core.accounts import user_by_email
from core.ids import new_id
from core.mail import enqueue_mail
from core.models import SignupRequest, utcnow
from core.settings import Settings
from core.web.sessions import token_digest

MAX_TOKEN = 100
# Sign-up mail is mail to an address its sender need not own: a few per hour is plenty for a person, and
# keeps the page from being a way to flood someone's mailbox.
MAILS_PER_ADDRESS = 3
MAIL_WINDOW = timedelta(hours=1)
# How long a spent or expired request is kept (to say "used" or "expired" rather than "unknown").
_KEEP = timedelta(days=7)


def _digest(secret_key: bytes, token: str) -> str:
    return token_digest(secret_key, "signup", token)


async def request_signup(
    session: AsyncSession, settings: Settings, base_url: str, email: str, password_hash: str, addr: str | None
) -> None:
    """Record a sign-up for `email` (normalised) and queue its mail, in the caller's transaction."""
    now = utcnow()
    await session.execute(sa.delete(SignupRequest).where(SignupRequest.expires_at < now - _KEEP))
    recent = await session.scalar(
        sa.select(sa.func.count())
        .select_from(SignupRequest)
        .where(SignupRequest.email == email, SignupRequest.created_at > now - MAIL_WINDOW)
    )
    exists = await user_by_email(session, email) is not None
    token = secrets.token_urlsafe(32)
    request = SignupRequest(
        id=new_id("sup"),
        email=email,
        token_digest=_digest(settings.secret_key, token),
        # An address with an account gets no link, so no password to keep.
        password_hash=None if exists else password_hash,
        remote_addr=addr,
        created_at=now,
        expires_at=now + timedelta(hours=settings.signup_link_hours),
    )
    session.add(request)
    if (recent or 0) >= MAILS_PER_ADDRESS:
        return
    context = {
        "email": email,
        "link": f"{base_url}/signup/confirm/{token}",
        "signin": f"{base_url}/signin",
        "hours": settings.signup_link_hours,
    }
    template = "api/mail/signup_exists.txt" if exists else "api/mail/signup_confirm.txt"
    await enqueue_mail(
        session,
        message_key=f"signup:{request.id}",
        sender=settings.mail_from,
        recipient=email,
        subject="Your Vouch account" if exists else "Confirm your Vouch account",
        text_body=await render_template(template, **context),
        smtp_configured=settings.smtp_url is not None,
    )


@dataclass(frozen=True)
class LinkState:
    """What a confirmation link stands for now: `pending` (it may confirm), `used`, `expired` or `unknown`."""

    status: str
    request: SignupRequest | None = None


async def find_request(session: AsyncSession, secret_key: bytes, token: str, now: datetime) -> LinkState:
    if not token or len(token) > MAX_TOKEN:
        return LinkState("unknown")
    digest = _digest(secret_key, token)
    found = await session.scalar(sa.select(SignupRequest).where(SignupRequest.token_digest == digest))
    if found is None or found.password_hash is None:
        return LinkState("unknown")
    if found.used_at is not None:
        return LinkState("used", found)
    if found.expires_at <= now:
        return LinkState("expired", found)
    if await user_by_email(session, found.email) is not None:
        # Another sign-up for the address was confirmed first (or the operator made the account).
        return LinkState("used", found)
    return LinkState("pending", found)


async def spend(session: AsyncSession, request: SignupRequest, now: datetime) -> bool:
    """Use the request (compare-and-set): True for the one caller that did, while it was still valid. Every
    other request for the address dies with it: the address has its account."""
    spent = await session.execute(
        sa.update(SignupRequest)
        .where(SignupRequest.id == request.id, SignupRequest.used_at.is_(None), SignupRequest.expires_at > now)
        .values(used_at=now),
        execution_options={"synchronize_session": False},
    )
    if spent.rowcount != 1:  # type: ignore[attr-defined]
        return False
    await session.execute(
        sa.update(SignupRequest)
        .where(SignupRequest.email == request.email, SignupRequest.used_at.is_(None))
        .values(used_at=now),
        execution_options={"synchronize_session": False},
    )
    return True
