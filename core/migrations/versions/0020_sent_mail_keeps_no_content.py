"""Mail that has left the outbox keeps its envelope, not its content (core/mail.py `without_content`)

Review and sign-in mail carry single-use tokens that the database otherwise keeps only as HMACs. From this version
a message that is sent or given up on drops its bodies and the `[vouch:<token>]` reply tag of its subject; this
does the same to the rows that left before it. There is no way back: downgrading leaves them as they are.

Revision ID: 0020
Revises: 0019
Create Date: 2026-11-26 01:30:00
"""

from __future__ import annotations

import re
import zlib

import sqlalchemy as sa
from alembic import op

revision = "0020"
down_revision = "0019"
branch_labels = None
depends_on = None

# As core/mail.py had them when this was written: a migration does not follow the code that comes after it.
_NOT_KEPT = "Vouch keeps no copy of a message's content once it has left the outbox: it held single-use links.\n"
_REPLY_TAG = re.compile(r"\[vouch:([0-9a-f]{8,64})\]")


def upgrade() -> None:
    mails = sa.table(
        "mail_messages",
        sa.column("id", sa.String()),
        sa.column("status", sa.String()),
        sa.column("subject", sa.String()),
        sa.column("text_body", sa.LargeBinary()),
        sa.column("html_body", sa.LargeBinary()),
    )
    bind = op.get_bind()
    left = mails.c.status.in_(("sent", "failed"))
    bind.execute(sa.update(mails).where(left).values(text_body=zlib.compress(_NOT_KEPT.encode(), 6), html_body=None))
    tagged = sa.select(mails.c.id, mails.c.subject).where(left, mails.c.subject.contains("[vouch:"))
    for message_id, subject in bind.execute(tagged).all():
        bind.execute(
            sa.update(mails).where(mails.c.id == message_id).values(subject=_REPLY_TAG.sub("", subject).rstrip())
        )


def downgrade() -> None:
    """Nothing to undo: the content is gone."""
