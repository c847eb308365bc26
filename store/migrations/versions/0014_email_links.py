"""The email surface: single-use decision links.

Each mailed card carries one link per action (approve, reject) for the principal it was
mailed to and the revision it showed; only the SHA-256 of a link's token is stored, so the
table holds nothing a reader could decide with.

Revision ID: 0014
Revises: 0013
Create Date: 2026-12-05 09:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from store.schema import UTCDateTime

revision: str = "0014"
down_revision: str | None = "0013"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "email_links",
        sa.Column("token_hash", sa.String(length=64), primary_key=True),
        sa.Column(
            "approval_id", sa.String(length=36), sa.ForeignKey("approvals.id"), nullable=False
        ),
        sa.Column("principal", sa.String(length=128), nullable=False),
        sa.Column("action", sa.String(length=16), nullable=False),
        sa.Column("shown_hash", sa.String(length=64), nullable=False),
        sa.Column("created_at", UTCDateTime(), nullable=False),
        sa.Column("expires_at", UTCDateTime(), nullable=False),
        sa.Column("used_at", UTCDateTime(), nullable=True),
    )
    op.create_index("ix_email_links_expires", "email_links", ["expires_at"])


def downgrade() -> None:
    op.drop_index("ix_email_links_expires", table_name="email_links")
    op.drop_table("email_links")
