"""Reminders before expiry: when a pending request's assignees are nudged (the route's
`remind_before` ahead of its deadline, fixed when the request is made) and when they were.

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-02 09:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from store.schema import UTCDateTime

revision: str = "0008"
down_revision: str | None = "0007"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# The sweeper's scan: pending rows with a reminder still to send.
_UNREMINDED = "state = 'pending' AND reminded_at IS NULL"


def upgrade() -> None:
    with op.batch_alter_table("approvals", schema=None) as batch:
        batch.add_column(sa.Column("remind_at", UTCDateTime(), nullable=True))
        batch.add_column(sa.Column("reminded_at", UTCDateTime(), nullable=True))
    op.create_index(
        "ix_approvals_reminder",
        "approvals",
        ["remind_at"],
        sqlite_where=sa.text(_UNREMINDED),
        postgresql_where=sa.text(_UNREMINDED),
    )


def downgrade() -> None:
    op.drop_index("ix_approvals_reminder", table_name="approvals")
    with op.batch_alter_table("approvals", schema=None) as batch:
        batch.drop_column("reminded_at")
        batch.drop_column("remind_at")
