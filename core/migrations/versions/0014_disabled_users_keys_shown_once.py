"""disabled_users_keys_shown_once: users an operator disabled, and a new key's secret sealed for one showing
(issue 24)

`vouch users disable EMAIL` stamps users.disabled_at; a disabled user cannot sign in, their sessions are ended and
their API keys stop working (the rows stay, so the record of who did what stays readable).

The keys page answers the form that creates a key with a redirect (a reload must never make a second key), so the
page it redirects to needs the secret once: api_keys.sealed_secret holds it XORed with a one-time pad that only
the creating browser holds (a short-lived cookie), and the first showing clears it.

Revision ID: 0014
Revises: 0013
Create Date: 2026-12-02 12:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("users") as batch:
        batch.add_column(sa.Column("disabled_at", sa.DateTime(timezone=True), nullable=True))
    with op.batch_alter_table("api_keys") as batch:
        batch.add_column(sa.Column("sealed_secret", sa.String(200), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("api_keys") as batch:
        batch.drop_column("sealed_secret")
    with op.batch_alter_table("users") as batch:
        batch.drop_column("disabled_at")
