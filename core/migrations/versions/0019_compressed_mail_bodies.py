"""mail_messages.text_body and html_body kept zlib-compressed (core/models_base.py CompressedText)

Every paused execution holds its review mail; since the HTML review mail (inline styles, as mail clients need) its
bodies were 6.6 KB of the 14.3 KB a paused execution cost on SQLite (bench/paused.py), past the 10 KB goal.
Existing rows are compressed in place.

Revision ID: 0019
Revises: 0018
Create Date: 2026-11-25 14:30:00
"""

from __future__ import annotations

import zlib

import sqlalchemy as sa
from alembic import op

revision = "0019"
down_revision = "0018"
branch_labels = None
depends_on = None

_BODIES = ("text_body", "html_body")


def _convert(encode: bool) -> None:
    """Each body into a new column of the other type, converted row by row, then in the old one's place."""
    stored, kind = (sa.Text(), sa.LargeBinary()) if encode else (sa.LargeBinary(), sa.Text())
    with op.batch_alter_table("mail_messages", schema=None) as batch_op:
        for body in _BODIES:
            batch_op.add_column(sa.Column(body + "_converted", kind, nullable=True))
    mails = sa.table(
        "mail_messages",
        sa.column("id", sa.String()),
        *(sa.column(body, stored) for body in _BODIES),
        *(sa.column(body + "_converted", kind) for body in _BODIES),
    )
    bind = op.get_bind()
    for row in bind.execute(sa.select(mails.c.id, *(mails.c[body] for body in _BODIES))).all():
        values = {
            body + "_converted": zlib.compress(value.encode(), 6) if encode else zlib.decompress(value).decode()
            for body, value in zip(_BODIES, row[1:], strict=True)
            if value is not None
        }
        if values:
            bind.execute(sa.update(mails).where(mails.c.id == row[0]).values(**values))
    with op.batch_alter_table("mail_messages", schema=None) as batch_op:
        for body in _BODIES:
            batch_op.drop_column(body)
            batch_op.alter_column(
                body + "_converted", new_column_name=body, existing_type=kind, nullable=body == "html_body"
            )


def upgrade() -> None:
    _convert(encode=True)


def downgrade() -> None:
    _convert(encode=False)
