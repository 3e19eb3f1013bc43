"""signup_requests: open sign-up proves the address before an account exists

An open sign-up used to make the account at once, so anyone could sign up as a reviewer's address and read
that address's review mail (dev mailbox) and inbox. Now a sign-up is a row here, and the account is made only
when the link mailed to the address is used. Existing users need nothing: every account that exists was made
by the operator or by an earlier sign-up, and counts as confirmed (there is no unconfirmed account to mark).

Revision ID: 0008
Revises: 0007
Create Date: 2026-11-23 10:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "signup_requests",
        sa.Column("id", sa.String(length=40), nullable=False),
        sa.Column("email", sa.String(length=320), nullable=False),
        sa.Column("token_digest", sa.String(length=64), nullable=False),
        sa.Column("password_hash", sa.String(length=200), nullable=True),
        sa.Column("remote_addr", sa.String(length=64), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("used_at", sa.DateTime(timezone=True), nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_signup_requests")),
        sa.UniqueConstraint("token_digest", name=op.f("uq_signup_requests_token_digest")),
    )
    op.create_index("ix_signup_requests_email_created", "signup_requests", ["email", "created_at"], unique=False)
    op.create_index("ix_signup_requests_expires_at", "signup_requests", ["expires_at"], unique=False)


def downgrade() -> None:
    op.drop_index("ix_signup_requests_expires_at", table_name="signup_requests")
    op.drop_index("ix_signup_requests_email_created", table_name="signup_requests")
    op.drop_table("signup_requests")
