"""Standing grants: a person's "approve, and allow the same for ..." given from a card, and
the approvals a grant approved at once (`approvals.grant_id`). Existing requests get NULL:
none was approved by a grant.

Revision ID: 0013
Revises: 0012
Create Date: 2026-12-02 15:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from store.schema import UTCDateTime

revision: str = "0013"
down_revision: str | None = "0012"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # Plain ADD COLUMN (not batch mode): see 0012.
    op.add_column("approvals", sa.Column("grant_id", sa.String(length=36), nullable=True))
    op.create_table(
        "standing_grants",
        sa.Column("id", sa.String(length=36), nullable=False),
        sa.Column("tenant", sa.String(length=128), nullable=False),
        sa.Column("capability", sa.String(length=256), nullable=False),
        sa.Column("tool_name", sa.String(length=256), nullable=False),
        sa.Column("run_id", sa.String(length=256), nullable=True),
        sa.Column("conditions", sa.JSON(none_as_null=True), nullable=True),
        sa.Column("granted_by", sa.String(length=128), nullable=False),
        sa.Column("as_delegate_of", sa.String(length=128), nullable=True),
        sa.Column("approval_id", sa.String(length=36), nullable=False),
        sa.Column("created_at", UTCDateTime(), nullable=False),
        sa.Column("expires_at", UTCDateTime(), nullable=False),
        sa.Column("max_uses", sa.Integer(), nullable=True),
        sa.Column("uses", sa.Integer(), server_default=sa.text("0"), nullable=False),
        sa.Column("revoked_at", UTCDateTime(), nullable=True),
        sa.Column("revoked_by", sa.String(length=200), nullable=True),
        sa.ForeignKeyConstraint(
            ["approval_id"],
            ["approvals.id"],
            name=op.f("fk_standing_grants_approval_id_approvals"),
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_standing_grants")),
    )
    op.create_index(
        "ix_standing_grants_call",
        "standing_grants",
        ["tenant", "capability", "tool_name", "expires_at"],
        unique=False,
    )


def downgrade() -> None:
    op.drop_index("ix_standing_grants_call", table_name="standing_grants")
    op.drop_table("standing_grants")
    op.drop_column("approvals", "grant_id")
