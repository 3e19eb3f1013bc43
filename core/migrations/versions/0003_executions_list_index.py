"""index for listing a user's executions newest first

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-21 15:35:00
"""

from __future__ import annotations

from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index("ix_executions_user_created", "executions", ["user_id", "created_at", "id"], unique=False)


def downgrade() -> None:
    op.drop_index("ix_executions_user_created", table_name="executions")
