"""the exact action at a checkpoint, edits before approval, agents that cannot read comments

- checkpoints.next_action: the action the agent proposed when it paused there (tool, arguments, whether a
  reviewer may edit it), readable without scanning events; kept after the decision, for the audit.
- decisions.original_args / edited_args: an approval with edited arguments keeps both.
- tool_calls.proposed_args: the arguments the agent proposed, when a reviewer's edit replaced them in `args`.
- executions.reads_comments: false for a rule-based agent, which cannot revise from a rejection's comment;
  its rejection ends the run. Existing runs of the offline agent are marked so.

Revision ID: 0009
Revises: 0008
Create Date: 2026-11-24 10:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("checkpoints", schema=None) as batch_op:
        batch_op.add_column(sa.Column("next_action", sa.JSON(), nullable=True))
    with op.batch_alter_table("decisions", schema=None) as batch_op:
        batch_op.add_column(sa.Column("original_args", sa.JSON(), nullable=True))
        batch_op.add_column(sa.Column("edited_args", sa.JSON(), nullable=True))
    with op.batch_alter_table("tool_calls", schema=None) as batch_op:
        batch_op.add_column(sa.Column("proposed_args", sa.JSON(), nullable=True))
    with op.batch_alter_table("executions", schema=None) as batch_op:
        batch_op.add_column(sa.Column("reads_comments", sa.Boolean(), server_default=sa.true(), nullable=False))
    op.execute(sa.text("UPDATE executions SET reads_comments = false WHERE agent_model = 'offline'"))


def downgrade() -> None:
    with op.batch_alter_table("executions", schema=None) as batch_op:
        batch_op.drop_column("reads_comments")
    with op.batch_alter_table("tool_calls", schema=None) as batch_op:
        batch_op.drop_column("proposed_args")
    with op.batch_alter_table("decisions", schema=None) as batch_op:
        batch_op.drop_column("edited_args")
        batch_op.drop_column("original_args")
    with op.batch_alter_table("checkpoints", schema=None) as batch_op:
        batch_op.drop_column("next_action")
