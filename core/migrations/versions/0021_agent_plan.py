"""The offline agent's plan in a column of its own, `executions.agent_plan`, written once when the run's first claim
makes it: the state every step saves (`agent_state`) no longer carries it (issue 25: 3.4 KB of JSON encoded, sent,
parsed and compressed again at every step of a 20-step run, for a value that never changes).

Rows written before keep their plan inside `agent_state`, where the runner still finds it; nothing is moved.

Revision ID: 0021
Revises: 0020
Create Date: 2026-11-28 23:15:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0021"
down_revision = "0020"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("executions") as batch:
        batch.add_column(sa.Column("agent_plan", sa.JSON(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("executions") as batch:
        batch.drop_column("agent_plan")
