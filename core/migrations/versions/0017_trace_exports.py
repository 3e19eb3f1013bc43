"""trace_exports: the outbox of OpenTelemetry spans (issue 23, item 6)

With OTEL_EXPORTER_OTLP_ENDPOINT set, the transaction that ends a run (or decides a review wait) writes a row
here; a worker builds the spans from the execution's events and exports them over OTLP, once.

Revision ID: 0017
Revises: 0014
Create Date: 2026-12-01 12:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0017"
down_revision = "0014"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "trace_exports",
        sa.Column("id", sa.String(length=40), nullable=False),
        sa.Column("execution_id", sa.String(length=40), nullable=False),
        sa.Column("unit", sa.String(length=120), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("next_attempt_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("locked_until", sa.DateTime(timezone=True), nullable=True),
        sa.Column("last_error", sa.Text(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("finished_at", sa.DateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(
            ["execution_id"],
            ["executions.id"],
            name=op.f("fk_trace_exports_execution_id_executions"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_trace_exports")),
        sa.UniqueConstraint("execution_id", "unit", name=op.f("uq_trace_exports_execution_id")),
    )
    with op.batch_alter_table("trace_exports", schema=None) as batch_op:
        batch_op.create_index("ix_trace_exports_due", ["status", "next_attempt_at"], unique=False)


def downgrade() -> None:
    op.drop_index("ix_trace_exports_due", table_name="trace_exports")
    op.drop_table("trace_exports")
