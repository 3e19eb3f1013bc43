"""The tables of people and their ways in: accounts, API keys and their daily use, browser sessions, sign-in
failures, sign-ups waiting for their address, and the creates an `Idempotency-Key` answers again."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.orm import Mapped, mapped_column

from core.models_base import Base, BigId, utcnow


class User(Base):
    __tablename__ = "users"
    id: Mapped[str] = mapped_column(sa.String(40), primary_key=True)
    email: Mapped[str] = mapped_column(sa.String(320), unique=True)
    password_hash: Mapped[str | None] = mapped_column(sa.String(200))
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    # Set by `vouch users disable`: no sign-in, no sessions, no working keys (issue 24).
    disabled_at: Mapped[datetime | None] = mapped_column()


class ApiKey(Base):
    __tablename__ = "api_keys"
    id: Mapped[str] = mapped_column(sa.String(40), primary_key=True)
    user_id: Mapped[str] = mapped_column(sa.ForeignKey("users.id", ondelete="CASCADE"), index=True)
    name: Mapped[str] = mapped_column(sa.String(100))
    description: Mapped[str] = mapped_column(sa.String(500), default="")
    scopes: Mapped[list[Any]] = mapped_column()
    digest: Mapped[str] = mapped_column(sa.String(64), unique=True)
    hint: Mapped[str] = mapped_column(sa.String(20))
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    expires_at: Mapped[datetime | None] = mapped_column()
    revoked_at: Mapped[datetime | None] = mapped_column()
    last_used_at: Mapped[datetime | None] = mapped_column()
    last_used_ip: Mapped[str | None] = mapped_column(sa.String(64))
    use_count: Mapped[int] = mapped_column(sa.BigInteger, default=0)
    # A new key's secret XORed with a pad only the creating browser holds, until the page after the form shows
    # it once (api/pages/key_reveal.py); None ever after.
    sealed_secret: Mapped[str | None] = mapped_column(sa.String(200))


class WebSession(Base):
    """A signed-in browser. The cookie holds a random token; only its HMAC is stored here."""

    __tablename__ = "web_sessions"
    id: Mapped[str] = mapped_column(sa.String(64), primary_key=True)
    user_id: Mapped[str] = mapped_column(sa.ForeignKey("users.id", ondelete="CASCADE"), index=True)
    csrf_token: Mapped[str] = mapped_column(sa.String(64))
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    last_seen_at: Mapped[datetime] = mapped_column(default=utcnow)
    expires_at: Mapped[datetime] = mapped_column(index=True)
    remote_addr: Mapped[str | None] = mapped_column(sa.String(64))
    user_agent: Mapped[str | None] = mapped_column(sa.String(300))


class SigninFailure(Base):
    """One failed sign-in; recent ones per address and per e-mail throttle further tries."""

    __tablename__ = "signin_failures"
    __table_args__ = (
        sa.Index("ix_signin_failures_email_at", "email", "at"),
        sa.Index("ix_signin_failures_ip_at", "remote_addr", "at"),
    )
    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    email: Mapped[str] = mapped_column(sa.String(320))
    remote_addr: Mapped[str | None] = mapped_column(sa.String(64))
    at: Mapped[datetime] = mapped_column(default=utcnow)


class SignupRequest(Base):
    """An open sign-up waiting for its address to be proven. No account exists until the link mailed to the
    address is used, with the password chosen here: until then there is nothing to sign in to, so no session,
    inbox, mailbox or key can be had for an address one cannot read. The token is stored as an HMAC."""

    __tablename__ = "signup_requests"
    __table_args__ = (sa.Index("ix_signup_requests_email_created", "email", "created_at"),)
    id: Mapped[str] = mapped_column(sa.String(40), primary_key=True)
    email: Mapped[str] = mapped_column(sa.String(320))
    token_digest: Mapped[str] = mapped_column(sa.String(64), unique=True)
    # None when the address already had an account: that mail says so and carries no link.
    password_hash: Mapped[str | None] = mapped_column(sa.String(200))
    remote_addr: Mapped[str | None] = mapped_column(sa.String(64))
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    expires_at: Mapped[datetime] = mapped_column(index=True)
    used_at: Mapped[datetime | None] = mapped_column()


class ApiKeyUsage(Base):
    """Requests per key per UTC day, written in batches (at most once a minute per key and process)."""

    __tablename__ = "api_key_usage"
    api_key_id: Mapped[str] = mapped_column(sa.ForeignKey("api_keys.id", ondelete="CASCADE"), primary_key=True)
    day: Mapped[str] = mapped_column(sa.String(10), primary_key=True)
    count: Mapped[int] = mapped_column(sa.BigInteger, default=0)


class IdempotencyRecord(Base):
    """An `Idempotency-Key` seen on a create: in flight, then the answer to replay for 24 h."""

    __tablename__ = "idempotency_records"
    __table_args__ = (sa.UniqueConstraint("user_id", "key"),)
    id: Mapped[str] = mapped_column(sa.String(40), primary_key=True)
    user_id: Mapped[str] = mapped_column(sa.ForeignKey("users.id", ondelete="CASCADE"))
    key: Mapped[str] = mapped_column(sa.String(255))
    request_hash: Mapped[str] = mapped_column(sa.String(64))
    # in_flight -> done
    state: Mapped[str] = mapped_column(sa.String(16))
    response_status: Mapped[int | None] = mapped_column()
    response_body: Mapped[dict[str, Any] | None] = mapped_column()
    response_headers: Mapped[dict[str, Any] | None] = mapped_column()
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    expires_at: Mapped[datetime] = mapped_column(index=True)
