"""Routing: the escalation step an approval has reached and how its assignee got it, and an
index for the sweeper's escalation scan.

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-29 13:40:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0004"
down_revision: str | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("approvals", schema=None) as batch_op:
        batch_op.add_column(
            sa.Column("escalation_level", sa.Integer(), nullable=False, server_default="0")
        )
        batch_op.add_column(sa.Column("assigned_note", sa.Text(), nullable=True))
        batch_op.create_index(
            "ix_approvals_escalation",
            ["escalate_at"],
            unique=False,
            sqlite_where=sa.text("state = 'pending'"),
            postgresql_where=sa.text("state = 'pending'"),
        )


def downgrade() -> None:
    with op.batch_alter_table("approvals", schema=None) as batch_op:
        batch_op.drop_index(
            "ix_approvals_escalation",
            sqlite_where=sa.text("state = 'pending'"),
            postgresql_where=sa.text("state = 'pending'"),
        )
        batch_op.drop_column("assigned_note")
        batch_op.drop_column("escalation_level")
