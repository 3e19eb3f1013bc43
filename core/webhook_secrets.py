"""Per-user webhook signing secrets (Standard Webhooks `whsec_…`) and the signature headers.

A secret is derived, never stored: HMAC-SHA256 of the server key over the user id and a generation
number. Only the generation is a row (WebhookSecret); a user without one is on generation 1. Rotating
moves to the next generation and keeps the previous one signing for 24 hours, so receivers can switch
over without missing a delivery: meanwhile `webhook-signature` carries both signatures.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncSession

from core.backends import backend_of
from core.models import WebhookSecret, utcnow

PREFIX = "whsec_"
ROTATION_OVERLAP = timedelta(hours=24)


def derive_secret(secret_key: bytes, user_id: str, generation: int) -> str:
    digest = hmac.new(secret_key, f"webhook-secret:{user_id}:{generation}".encode(), hashlib.sha256).digest()
    return PREFIX + base64.b64encode(digest).decode()


@dataclass(frozen=True)
class SigningSecrets:
    """The secret to show (current) and every secret that signs right now (current first)."""

    current: str
    generation: int
    signing: tuple[str, ...]
    previous_retires_at: datetime | None


async def signing_secrets(
    session: AsyncSession, secret_key: bytes, user_id: str, now: datetime | None = None
) -> SigningSecrets:
    now = now or utcnow()
    row = await session.get(WebhookSecret, user_id)
    generation = row.generation if row is not None else 1
    current = derive_secret(secret_key, user_id, generation)
    signing = [current]
    retires_at = None
    if row is not None and row.previous_generation is not None and row.retires_at is not None and row.retires_at > now:
        signing.append(derive_secret(secret_key, user_id, row.previous_generation))
        retires_at = row.retires_at
    return SigningSecrets(current, generation, tuple(signing), retires_at)


async def rotate_secret(
    session: AsyncSession, secret_key: bytes, user_id: str, now: datetime | None = None
) -> SigningSecrets:
    """Move the user to the next generation; the one replaced keeps signing for ROTATION_OVERLAP.

    A rotation within the overlap of the previous one retires the older secret at once: only the
    secret being replaced stays valid beside the new one.
    """
    now = now or utcnow()
    # Make sure the row exists (generation 1 is implicit until the first rotation), then move it forward
    # with one conditional UPDATE, so two rotations at once each advance it exactly one step.
    insert = backend_of(session).insert(WebhookSecret)
    await session.execute(
        insert.values(user_id=user_id, generation=1).on_conflict_do_nothing(index_elements=["user_id"])
    )
    await session.execute(
        sa.update(WebhookSecret)
        .where(WebhookSecret.user_id == user_id)
        .values(
            previous_generation=WebhookSecret.generation,
            generation=WebhookSecret.generation + 1,
            retires_at=now + ROTATION_OVERLAP,
            rotated_at=now,
        ),
        execution_options={"synchronize_session": False},
    )
    row = await session.get(WebhookSecret, user_id)
    if row is not None:
        await session.refresh(row)
    return await signing_secrets(session, secret_key, user_id, now)


def sign(secrets: Sequence[str], message_id: str, timestamp: int, body: bytes) -> str:
    """The `webhook-signature` value: `v1,<base64 HMAC-SHA256 of id.timestamp.body>` per secret,
    space-separated (Standard Webhooks)."""
    signed = f"{message_id}.{timestamp}.".encode() + body
    parts = []
    for secret in secrets:
        key = base64.b64decode(secret.removeprefix(PREFIX))
        parts.append("v1," + base64.b64encode(hmac.new(key, signed, hashlib.sha256).digest()).decode())
    return " ".join(parts)
