"""executions.error_info: a failed execution's error as {code, detail, ...}

`error` keeps the one-line text (old rows have only that); `error_info` holds the structured error with
its stable code (core/errors.py), which the status record and the completion webhook serve. Existing
failed rows keep a null `error_info` and are served as `{"code": "unclassified", "detail": error}`.

Revision ID: 0011
Revises: 0009
Create Date: 2026-11-25 10:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0011"
down_revision = "0009"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("executions") as batch:
        batch.add_column(sa.Column("error_info", sa.JSON(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("executions") as batch:
        batch.drop_column("error_info")
