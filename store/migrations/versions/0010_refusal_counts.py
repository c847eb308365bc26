"""Refusals counted per person and request: the audit trail records the first few refused
attempts of each (actor, approval) as events and `refusal_counts` counts every one, so
repeating a refused click or POST cannot grow a request's trail without limit.

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-03 09:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from store.schema import UTCDateTime

revision: str = "0010"
down_revision: str | None = "0009"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "refusal_counts",
        sa.Column("approval_id", sa.String(length=36), nullable=False),
        sa.Column("actor", sa.String(length=200), nullable=False),
        sa.Column("refused", sa.Integer(), nullable=False),
        sa.Column("last_at", UTCDateTime(), nullable=False),
        sa.Column("last_action", sa.String(length=16), nullable=False),
        sa.Column("last_code", sa.String(length=64), nullable=False),
        sa.ForeignKeyConstraint(["approval_id"], ["approvals.id"]),
        sa.PrimaryKeyConstraint("approval_id", "actor"),
    )


def downgrade() -> None:
    op.drop_table("refusal_counts")
