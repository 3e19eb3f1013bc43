"""external_keys: what an external agent sent, by the agent's own key (issue 22)

An agent driving an execution over REST names each event and checkpoint with a key of its own; a retried
request finds the key here and answers as the first time did.

Revision ID: 0012
Revises: 0011
Create Date: 2026-11-25 12:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "external_keys",
        sa.Column(
            "execution_id", sa.String(40), sa.ForeignKey("executions.id", ondelete="CASCADE"), primary_key=True
        ),
        sa.Column("key", sa.String(200), primary_key=True),
        sa.Column("kind", sa.String(16), nullable=False),
        sa.Column("ref", sa.String(40), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("external_keys")
