"""suites, suite_tasks, suite_runs and executions.suite_id (issue 23, item 3)

A suite plans all its runs up front (task x model x mode x repeat), each a `suite_runs` row that is `pending`
until it is started within the key's concurrency limit and linked to its execution.

Revision ID: 0018
Revises: 0017
Create Date: 2026-12-12 10:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0018"
down_revision = "0017"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "suites",
        sa.Column("id", sa.String(length=40), nullable=False),
        sa.Column("user_id", sa.String(length=40), nullable=False),
        sa.Column("api_key_id", sa.String(length=40), nullable=True),
        sa.Column("name", sa.String(length=200), nullable=False),
        sa.Column("test_mode", sa.String(length=32), nullable=True),
        sa.Column("repeats", sa.Integer(), nullable=False),
        sa.Column("models", sa.JSON(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("cancelled_at", sa.DateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(["user_id"], ["users.id"], name=op.f("fk_suites_user_id_users"), ondelete="CASCADE"),
        sa.ForeignKeyConstraint(
            ["api_key_id"], ["api_keys.id"], name=op.f("fk_suites_api_key_id_api_keys"), ondelete="SET NULL"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_suites")),
    )
    op.create_index("ix_suites_user_created", "suites", ["user_id", "created_at", "id"])
    op.create_table(
        "suite_tasks",
        sa.Column("suite_id", sa.String(length=40), nullable=False),
        sa.Column("task_index", sa.Integer(), nullable=False),
        sa.Column("task_name", sa.String(length=200), nullable=False),
        sa.Column("body", sa.JSON(), nullable=False),
        sa.ForeignKeyConstraint(
            ["suite_id"], ["suites.id"], name=op.f("fk_suite_tasks_suite_id_suites"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("suite_id", "task_index", name=op.f("pk_suite_tasks")),
    )
    op.create_table(
        "suite_runs",
        sa.Column("id", sa.String(length=40), nullable=False),
        sa.Column("suite_id", sa.String(length=40), nullable=False),
        sa.Column("position", sa.Integer(), nullable=False),
        sa.Column("task_index", sa.Integer(), nullable=False),
        sa.Column("model", sa.String(length=200), nullable=False),
        sa.Column("test_mode", sa.String(length=32), nullable=False),
        sa.Column("repeat", sa.Integer(), nullable=False),
        sa.Column("state", sa.String(length=16), nullable=False),
        sa.Column("execution_id", sa.String(length=40), nullable=True),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(
            ["suite_id"], ["suites.id"], name=op.f("fk_suite_runs_suite_id_suites"), ondelete="CASCADE"
        ),
        sa.ForeignKeyConstraint(
            ["execution_id"],
            ["executions.id"],
            name=op.f("fk_suite_runs_execution_id_executions"),
            ondelete="SET NULL",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_suite_runs")),
        sa.UniqueConstraint("suite_id", "position", name=op.f("uq_suite_runs_suite_id")),
        sa.UniqueConstraint("execution_id", name=op.f("uq_suite_runs_execution_id")),
    )
    op.create_index("ix_suite_runs_state", "suite_runs", ["state", "suite_id"])
    with op.batch_alter_table("executions") as batch:
        batch.add_column(sa.Column("suite_id", sa.String(length=40), nullable=True))
        batch.create_foreign_key(
            op.f("fk_executions_suite_id_suites"), "suites", ["suite_id"], ["id"], ondelete="SET NULL"
        )


def downgrade() -> None:
    with op.batch_alter_table("executions") as batch:
        batch.drop_constraint(op.f("fk_executions_suite_id_suites"), type_="foreignkey")
        batch.drop_column("suite_id")
    op.drop_index("ix_suite_runs_state", table_name="suite_runs")
    op.drop_table("suite_runs")
    op.drop_table("suite_tasks")
    op.drop_index("ix_suites_user_created", table_name="suites")
    op.drop_table("suites")
