"""Execution tracking: grant expiry as a column, the origin of interrupted_side_effect
approvals, and partial indexes for the sweeper's grant and lease scans.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-29 10:10:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from store.schema import UTCDateTime

revision: str = "0002"
down_revision: str | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("approvals", schema=None) as batch_op:
        batch_op.add_column(sa.Column("grant_expires_at", UTCDateTime(), nullable=True))
        batch_op.add_column(sa.Column("origin_id", sa.String(length=36), nullable=True))
        batch_op.create_index(
            "ix_approvals_grant_expiry",
            ["grant_expires_at"],
            unique=False,
            sqlite_where=sa.text("state = 'approved'"),
            postgresql_where=sa.text("state = 'approved'"),
        )
        batch_op.create_index(
            "ix_approvals_lease",
            ["lease_until"],
            unique=False,
            sqlite_where=sa.text("state = 'executing'"),
            postgresql_where=sa.text("state = 'executing'"),
        )
    # Grants approved before this revision run out grant_ttl_s after their decision.
    if op.get_bind().dialect.name == "postgresql":
        expiry = "decided_at + grant_ttl_s * interval '1 second'"
    else:
        expiry = "strftime('%Y-%m-%d %H:%M:%f', decided_at, '+' || grant_ttl_s || ' seconds')"
    op.execute(
        sa.text(
            f"UPDATE approvals SET grant_expires_at = {expiry} WHERE state = 'approved'"
            " AND grant_expires_at IS NULL AND decided_at IS NOT NULL"
        )
    )


def downgrade() -> None:
    with op.batch_alter_table("approvals", schema=None) as batch_op:
        batch_op.drop_index(
            "ix_approvals_lease",
            sqlite_where=sa.text("state = 'executing'"),
            postgresql_where=sa.text("state = 'executing'"),
        )
        batch_op.drop_index(
            "ix_approvals_grant_expiry",
            sqlite_where=sa.text("state = 'approved'"),
            postgresql_where=sa.text("state = 'approved'"),
        )
        batch_op.drop_column("origin_id")
        batch_op.drop_column("grant_expires_at")
