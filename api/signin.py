"""Checking a sign-in: throttling by e-mail and by address, then the password.

Throttling is time-based and kept in the database (SigninFailure rows), so it holds across processes and
restarts and needs no sleeps: after EMAIL_LIMIT failures for one e-mail, or ADDRESS_LIMIT from one address,
within WINDOW, further tries are refused (without checking the password, so a guess cannot be confirmed)
until the oldest of those failures leaves the window. A success clears the e-mail's failures.
Unknown e-mail and wrong password get the same answer after the same work (a dummy hash is verified).

Every try is counted as a failure *before* its password is checked (`reserve_attempt`), and the success
takes it back. Counting after the check let a burst of simultaneous tries all pass the count (none had
failed yet), each get its password checked, and a right one among them sign in during a lockout. The count
and the reservation are one serialised step per e-mail and per address: on SQLite the write transaction
holds the database's one write lock (BEGIN IMMEDIATE, core/sqlite.py); on PostgreSQL transaction-scoped
advisory locks on the e-mail and the address, taken before counting. Both hold across web processes.
"""

from __future__ import annotations

import asyncio
import hashlib
import math
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm import InstrumentedAttribute

from core.accounts import AccountError, hash_password, normalise_email, password_matches, password_needs_rehash
from core.backends import backend_of
from core.db import Database
from core.models import SigninFailure, User

EMAIL_LIMIT = 5
ADDRESS_LIMIT = 20
WINDOW = timedelta(minutes=15)
# Argon2 verifies whatever it is given; a megabyte "password" would be a cheap way to burn CPU.
MAX_PASSWORD = 1024
BAD_CREDENTIALS = "That e-mail and password do not match an account."
# The first key of PostgreSQL's two-key advisory locks: one namespace for e-mails, one for addresses, so a
# lock taken for one can never be the other's (and the e-mail-then-address order cannot deadlock).
_LOCK_EMAIL = 0x5A61
_LOCK_ADDRESS = 0x5A62


@dataclass(frozen=True)
class Refusal:
    message: str
    retry_after: int  # seconds


def email_key(raw: str) -> str:
    """The form the throttle counts an e-mail under (the stored form when it is a valid address)."""
    try:
        return normalise_email(raw)
    except AccountError:
        return raw.strip().lower()[:320]


async def _wait_needed(
    session: AsyncSession, column: InstrumentedAttribute[Any], value: str, limit: int, now: datetime
) -> int | None:
    # The limit-th most recent failure in the window: while it is inside, the limit is reached.
    oldest_counted = await session.scalar(
        sa.select(SigninFailure.at)
        .where(column == value, SigninFailure.at > now - WINDOW)
        .order_by(SigninFailure.at.desc())
        .offset(limit - 1)
        .limit(1)
    )
    if oldest_counted is None:
        return None
    return max(1, math.ceil((oldest_counted + WINDOW - now).total_seconds()))


async def throttled(session: AsyncSession, email: str, addr: str | None, now: datetime) -> Refusal | None:
    wait = await _wait_needed(session, SigninFailure.email, email, EMAIL_LIMIT, now)
    if wait is not None:
        return Refusal(f"Too many failed sign-ins for this e-mail. Try again in {_minutes(wait)}.", wait)
    if addr is not None:
        wait = await _wait_needed(session, SigninFailure.remote_addr, addr, ADDRESS_LIMIT, now)
        if wait is not None:
            return Refusal(f"Too many failed sign-ins from your address. Try again in {_minutes(wait)}.", wait)
    return None


def _minutes(seconds: int) -> str:
    minutes = math.ceil(seconds / 60)
    return "1 minute" if minutes == 1 else f"{minutes} minutes"


def _lock_key(value: str) -> int:
    # A signed 32-bit int from the value; two values sharing one only take turns needlessly.
    return int.from_bytes(hashlib.blake2b(value.encode(), digest_size=4).digest(), "big", signed=True)


async def _serialise(session: AsyncSession, email: str, addr: str | None) -> None:
    """Make this transaction the only one counting for this e-mail and this address until it commits."""
    locks = [(_LOCK_EMAIL, _lock_key(email))]
    if addr is not None:
        locks.append((_LOCK_ADDRESS, _lock_key(addr)))
    # The count that follows then sees the reservation of whoever held a lock before.
    await backend_of(session).take_turns(session, locks)


async def reserve_attempt(db: Database, email: str, addr: str | None, now: datetime) -> Refusal | None:
    """Count this try as a failure now, before its password is checked: a Refusal when the limit is already
    reached, otherwise None with the try's row committed (so concurrent tries count it).
    A wrong password leaves the row as the failure it is; a right one takes it back (`clear_failures`)."""
    async with db.transaction() as session:
        await _serialise(session, email, addr)
        refusal = await throttled(session, email, addr, now)
        if refusal is not None:
            return refusal
        session.add(SigninFailure(email=email, remote_addr=addr, at=now))
        # Rows past the window count for nothing; sweeping on each try keeps the table small.
        await session.execute(sa.delete(SigninFailure).where(SigninFailure.at <= now - WINDOW))
        return None


async def check_credentials(reader: AsyncSession, email: str, password: str) -> str | None:
    """The id of the user whose password this is, or None; always costs one password verification.

    Takes a read session: on SQLite a write transaction would hold the database's one write lock
    through the ~0.2 s of Argon2 and stall every other writer."""
    # A disabled user's password is checked like an unknown e-mail's: against the dummy hash, same time, same answer.
    found = (
        await reader.execute(
            sa.select(User.id, User.password_hash).where(User.email == email, User.disabled_at.is_(None))
        )
    ).first()
    user_id, stored = (found[0], found[1]) if found is not None else (None, None)
    if len(password) > MAX_PASSWORD:
        password = ""
    # CPU-bound; off the event loop, other requests keep flowing.
    if not await asyncio.to_thread(password_matches, stored, password):
        return None
    return user_id


async def upgrade_hash(session: AsyncSession, user: User, password: str) -> None:
    """Re-hash with today's Argon2 parameters when the stored hash used older ones."""
    if user.password_hash and password_needs_rehash(user.password_hash):
        user.password_hash = await asyncio.to_thread(hash_password, password)


async def clear_failures(session: AsyncSession, email: str) -> None:
    await session.execute(sa.delete(SigninFailure).where(SigninFailure.email == email))
