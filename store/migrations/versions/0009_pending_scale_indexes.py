"""Indexes that keep monitoring and the API's list cheap at 100,000 pending: the list by
state as a range of (tenant, state, created_at, id), the metrics' pending count and oldest
per (tenant, capability) from a partial index of pending rows alone, and the pending rows past
their last escalation step from a partial index that holds only them.

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-03 09:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0009"
down_revision: str | None = "0008"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_PENDING = "state = 'pending'"
_PAST_LAST_ESCALATION = "state = 'pending' AND escalation_level > 0 AND escalate_at IS NULL"


def upgrade() -> None:
    op.create_index(
        "ix_approvals_tenant_state_created",
        "approvals",
        ["tenant", "state", "created_at", "id"],
    )
    op.create_index(
        "ix_approvals_pending_summary",
        "approvals",
        ["state", "tenant", "capability", "created_at"],
        sqlite_where=sa.text(_PENDING),
        postgresql_where=sa.text(_PENDING),
    )
    op.create_index(
        "ix_approvals_past_last_escalation",
        "approvals",
        ["state", "tenant"],
        sqlite_where=sa.text(_PAST_LAST_ESCALATION),
        postgresql_where=sa.text(_PAST_LAST_ESCALATION),
    )


def downgrade() -> None:
    op.drop_index("ix_approvals_past_last_escalation", table_name="approvals")
    op.drop_index("ix_approvals_pending_summary", table_name="approvals")
    op.drop_index("ix_approvals_tenant_state_created", table_name="approvals")
