"""Evaluation verdicts (issue 23): what a run is expected to produce, how it is scored, and the verdict.

executions: `expected` (any JSON value the caller gave), `scorers` (the normalised list), and the verdict in
columns a suite can aggregate in SQL: `verdict_state` (null: no scorers; pending -> grading (a human grade
waits) → done), `verdict_passed` (true/false/null), `verdict_score` (0..1 or null), `verdict_scores` (the
per-scorer list), `verdict_at`, and `verdict_lease_until` (the scorer's claim, so a dead worker's scoring is
taken over). decisions: a reviewer's optional `rating` (1-5) and `labels`.

Revision ID: 0013
Revises: 0012
Create Date: 2026-12-10 10:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("executions") as batch:
        batch.add_column(sa.Column("expected", sa.JSON(none_as_null=True), nullable=True))
        batch.add_column(sa.Column("scorers", sa.JSON(), nullable=True))
        batch.add_column(sa.Column("verdict_state", sa.String(16), nullable=True))
        batch.add_column(sa.Column("verdict_passed", sa.Boolean(), nullable=True))
        batch.add_column(sa.Column("verdict_score", sa.Float(), nullable=True))
        batch.add_column(sa.Column("verdict_scores", sa.JSON(), nullable=True))
        batch.add_column(sa.Column("verdict_at", sa.DateTime(timezone=True), nullable=True))
        batch.add_column(sa.Column("verdict_lease_until", sa.DateTime(timezone=True), nullable=True))
        batch.create_index("ix_executions_verdict_state", ["verdict_state"])
    with op.batch_alter_table("decisions") as batch:
        batch.add_column(sa.Column("rating", sa.Integer(), nullable=True))
        batch.add_column(sa.Column("labels", sa.JSON(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("decisions") as batch:
        batch.drop_column("labels")
        batch.drop_column("rating")
    with op.batch_alter_table("executions") as batch:
        batch.drop_index("ix_executions_verdict_state")
        for column in (
            "verdict_lease_until",
            "verdict_at",
            "verdict_scores",
            "verdict_score",
            "verdict_passed",
            "verdict_state",
            "scorers",
            "expected",
        ):
            batch.drop_column(column)
