"""The operator dashboard's indexes: recent decisions and how long they took, and per-day
counts of requests made and decided, each read from an index instead of every row.

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-01 09:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0007"
down_revision: str | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_DECIDED = "decided_at IS NOT NULL"


def upgrade() -> None:
    op.create_index(
        "ix_approvals_decided",
        "approvals",
        ["decided_at", "created_at"],
        sqlite_where=sa.text(_DECIDED),
        postgresql_where=sa.text(_DECIDED),
    )
    op.create_index("ix_approval_events_type_at", "approval_events", ["type", "at"])


def downgrade() -> None:
    op.drop_index("ix_approval_events_type_at", table_name="approval_events")
    op.drop_index("ix_approvals_decided", table_name="approvals")
