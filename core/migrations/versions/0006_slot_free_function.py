"""PostgreSQL: vouch_slot_free, the create's lock and count in one call

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-22 02:00:00

A create checks that its API key has a free execution slot (api/concurrency.py). On PostgreSQL that took a
statement of its own to lock the key, because a statement that waited for a lock still reads the snapshot taken
before it waited. The statements inside a VOLATILE PL/pgSQL function each take a snapshot of their own, so this
function locks the key, then counts what the creates that held the lock before it have committed. The create is
then one statement. SQLite needs nothing: its creates hold the database's one write lock (BEGIN IMMEDIATE).
"""

from __future__ import annotations

from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None

_FUNCTION = """
CREATE FUNCTION vouch_slot_free(key_id varchar, statuses varchar[], slot_limit integer) RETURNS boolean
LANGUAGE plpgsql VOLATILE AS $$
BEGIN
    PERFORM 1 FROM api_keys WHERE id = key_id FOR NO KEY UPDATE;
    RETURN (SELECT count(*) FROM executions WHERE api_key_id = key_id AND status = ANY(statuses)) < slot_limit;
END
$$
"""


def upgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute(_FUNCTION)


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute("DROP FUNCTION vouch_slot_free(varchar, varchar[], integer)")
