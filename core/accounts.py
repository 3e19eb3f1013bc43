"""Users and their API keys: the services behind the operator CLI and the account pages."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import cache
from typing import Protocol

import sqlalchemy as sa
from argon2 import PasswordHasher
from argon2.exceptions import InvalidHashError, VerificationError
from email_validator import EmailNotValidError, validate_email
from sqlalchemy.ext.asyncio import AsyncSession

from core import apikeys
from core.bus import CACHE_CHANNEL
from core.db import publish_after_commit
from core.ids import new_id
from core.models import ApiKey, User, WebSession, utcnow

MAX_ACTIVE_KEYS = 10
MAX_KEY_DAYS = 365
_hasher = PasswordHasher()


class AccountError(ValueError):
    """Input an operator or user must correct; the message says how."""


def normalise_email(raw: str) -> str:
    try:
        checked = validate_email(raw.strip(), check_deliverability=False)
    except EmailNotValidError as exc:
        raise AccountError(f"not a valid e-mail address: {raw!r} ({exc})") from None
    return checked.normalized.lower()


def hash_password(password: str) -> str:
    return _hasher.hash(password)


@cache
def _dummy_hash() -> str:
    return _hasher.hash("no user has this password")


def password_matches(stored_hash: str | None, password: str) -> bool:
    """Check a password; with no stored hash, verify against a dummy so the work (and the time an
    observer sees) is the same for an unknown e-mail as for a wrong password. CPU-bound: ~0.2 s."""
    try:
        return _hasher.verify(stored_hash or _dummy_hash(), password) and stored_hash is not None
    except (VerificationError, InvalidHashError):
        return False


def password_needs_rehash(stored_hash: str) -> bool:
    return _hasher.check_needs_rehash(stored_hash)


async def create_user(session: AsyncSession, email: str, password: str | None = None) -> User:
    email = normalise_email(email)
    if await user_by_email(session, email) is not None:
        raise AccountError(f"a user with e-mail {email} already exists")
    if password is not None:
        check_new_password(password)
    user = User(id=new_id("usr"), email=email, password_hash=hash_password(password) if password else None)
    session.add(user)
    await session.flush()
    return user


async def user_by_email(session: AsyncSession, email: str) -> User | None:
    return await session.scalar(sa.select(User).where(User.email == email.strip().lower()))


def check_new_password(password: str) -> None:
    if len(password) < 8:
        raise AccountError("password must be at least 8 characters")


async def set_password(session: AsyncSession, user: User, password: str) -> None:
    """A new password; the user's other browser sessions end, so a password changed after a leak locks the
    holder of an old session out too."""
    check_new_password(password)
    user.password_hash = hash_password(password)
    await session.execute(sa.delete(WebSession).where(WebSession.user_id == user.id))


async def list_users(session: AsyncSession) -> list[User]:
    return list(await session.scalars(sa.select(User).order_by(User.created_at, User.email)))


async def disable_user(session: AsyncSession, user: User) -> bool:
    """Disable `user`: no sign-in from now on, every browser session ended, every API key refused (web processes
    drop their cached copies when this commits). The rows stay. False if the user was disabled already."""
    await session.execute(sa.delete(WebSession).where(WebSession.user_id == user.id))
    invalidate_api_keys_after_commit(session, user_ids=[user.id])
    if user.disabled_at is not None:
        return False
    user.disabled_at = utcnow()
    return True


async def enable_user(session: AsyncSession, user: User) -> bool:
    """Let a disabled user sign in again and their unrevoked keys work again; False if they were not disabled.
    Their old browser sessions stay ended, and review links spent meanwhile stay spent."""
    if user.disabled_at is None:
        return False
    user.disabled_at = None
    invalidate_api_keys_after_commit(session, user_ids=[user.id])
    return True


def key_is_active(key: ApiKey, now: datetime) -> bool:
    return key.revoked_at is None and (key.expires_at is None or key.expires_at > now)


class KeyValidity(Protocol):
    """What a key's state is judged by: a stored key, or its cached copy (core/auth_cache.py)."""

    @property
    def revoked_at(self) -> datetime | None: ...

    @property
    def expires_at(self) -> datetime | None: ...


def key_state(key: KeyValidity, now: datetime) -> str:
    if key.revoked_at is not None:
        return "revoked"
    if key.expires_at is not None and key.expires_at <= now:
        return "expired"
    return "active"


async def active_key_count(session: AsyncSession, user_id: str, now: datetime) -> int:
    count = await session.scalar(
        sa.select(sa.func.count())
        .select_from(ApiKey)
        .where(
            ApiKey.user_id == user_id,
            ApiKey.revoked_at.is_(None),
            sa.or_(ApiKey.expires_at.is_(None), ApiKey.expires_at > now),
        )
    )
    return count or 0


@dataclass(frozen=True)
class NewKey:
    record: ApiKey
    secret: str


async def create_api_key(
    session: AsyncSession,
    user: User,
    *,
    name: str,
    scopes: list[str],
    secret_key: bytes,
    description: str = "",
    expires_in_days: int | None = 30,
    expires_at: datetime | None = None,
) -> NewKey:
    """A new key for `user`; `expires_at` (a moment within MAX_KEY_DAYS) wins over `expires_in_days`."""
    name = name.strip()
    if not name or len(name) > 100:
        raise AccountError("key name must be 1 to 100 characters")
    if len(description) > 500:
        raise AccountError("key description must be at most 500 characters")
    unknown = sorted(set(scopes) - set(apikeys.SCOPES))
    if unknown or not scopes:
        raise AccountError(
            f"unknown scope {', '.join(unknown)}; choose from {', '.join(apikeys.SCOPES)}"
            if unknown
            else f"at least one scope is required: {', '.join(apikeys.SCOPES)}"
        )
    if expires_at is None and expires_in_days is not None and not 1 <= expires_in_days <= MAX_KEY_DAYS:
        raise AccountError(f"expiry must be 1 to {MAX_KEY_DAYS} days")
    # Lock the user's row so two concurrent creations cannot both pass the limit check.
    await session.execute(
        sa.update(User).where(User.id == user.id).values(email=User.email),
        execution_options={"synchronize_session": False},
    )
    now = utcnow()
    if expires_at is None and expires_in_days is not None:
        expires_at = now + timedelta(days=expires_in_days)
    if expires_at is not None and not now < expires_at <= now + timedelta(days=MAX_KEY_DAYS):
        raise AccountError(f"expiry must be in the future and at most {MAX_KEY_DAYS} days away")
    if await active_key_count(session, user.id, now) >= MAX_ACTIVE_KEYS:
        raise AccountError(f"{user.email} already holds {MAX_ACTIVE_KEYS} active keys; revoke one first")
    secret = apikeys.generate_key()
    record = ApiKey(
        id=new_id("key"),
        user_id=user.id,
        name=name,
        description=description.strip(),
        scopes=sorted(set(scopes)),
        digest=apikeys.key_digest(secret, secret_key),
        hint=apikeys.display_hint(secret),
        created_at=now,
        expires_at=expires_at,
        use_count=0,
    )
    session.add(record)
    await session.flush()
    return NewKey(record=record, secret=secret)


async def list_api_keys(session: AsyncSession, user: User) -> list[ApiKey]:
    rows = await session.scalars(sa.select(ApiKey).where(ApiKey.user_id == user.id).order_by(ApiKey.created_at.desc()))
    return list(rows)


async def revoke_api_key(session: AsyncSession, key_id: str, user_id: str | None = None) -> ApiKey:
    """Revoke a key; `user_id` limits it to that user's keys (the CLI operator may revoke any)."""
    query = sa.select(ApiKey).where(ApiKey.id == key_id)
    if user_id is not None:
        query = query.where(ApiKey.user_id == user_id)
    key = await session.scalar(query)
    if key is None:
        raise AccountError(f"no API key with id {key_id}")
    if key.revoked_at is None:
        key.revoked_at = utcnow()
        invalidate_api_keys_after_commit(session, key_ids=[key.id])
    return key


def invalidate_api_keys_after_commit(
    session: AsyncSession, *, key_ids: Iterable[str] = (), user_ids: Iterable[str] = ()
) -> None:
    """Web processes cache API keys (core/auth_cache.py): once `session` commits, tell each over the bus to forget
    these keys and every key of these users. Call it in any transaction that revokes a key, changes its scopes,
    or changes, disables or deletes its owner."""
    publish_after_commit(session, CACHE_CHANNEL, {"apiKeys": sorted(key_ids), "users": sorted(user_ids)})


async def api_key_by_secret(session: AsyncSession, secret: str, secret_key: bytes) -> ApiKey | None:
    """The key record for a presented secret, whatever its state; None for a look-alike or a disabled user's key."""
    if not apikeys.is_well_formed(secret):
        return None
    return await session.scalar(
        sa.select(ApiKey)
        .join(User, User.id == ApiKey.user_id)
        .where(ApiKey.digest == apikeys.key_digest(secret, secret_key), User.disabled_at.is_(None))
    )


async def enabled_users_key(session: AsyncSession, key_id: str) -> ApiKey | None:
    """The key with this id, whatever its state, unless its user is disabled."""
    return await session.scalar(
        sa.select(ApiKey).join(User, User.id == ApiKey.user_id).where(ApiKey.id == key_id, User.disabled_at.is_(None))
    )


async def api_key_and_email_by_secret(
    session: AsyncSession, secret: str, secret_key: bytes
) -> tuple[ApiKey, str] | None:
    """The key record and its owner's e-mail in one query (every API request asks for both); None if unknown."""
    if not apikeys.is_well_formed(secret):
        return None
    return await api_key_and_email_by_digest(session, apikeys.key_digest(secret, secret_key))


async def api_key_and_email_by_digest(session: AsyncSession, digest: str) -> tuple[ApiKey, str] | None:
    found = (
        await session.execute(
            # A disabled user's keys are as unknown as keys that never existed.
            sa.select(ApiKey, User.email)
            .join(User, User.id == ApiKey.user_id)
            .where(ApiKey.digest == digest, User.disabled_at.is_(None))
        )
    ).first()
    return (found[0], found[1]) if found is not None else None
