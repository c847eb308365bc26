"""Embeddable approvals: short-lived tokens that let a partner's page frame one request.

A token shows one request to one principal, framed by one allowed origin, and decides it
once before it expires; only the SHA-256 of a token is stored, so the table holds nothing a
reader could open the page with.

Revision ID: 0015
Revises: 0014
Create Date: 2026-12-06 20:30:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from store.schema import UTCDateTime

revision: str = "0015"
down_revision: str | None = "0014"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "embed_tokens",
        sa.Column("token_hash", sa.String(length=64), primary_key=True),
        sa.Column(
            "approval_id", sa.String(length=36), sa.ForeignKey("approvals.id"), nullable=False
        ),
        sa.Column("principal", sa.String(length=128), nullable=False),
        sa.Column("parent_origin", sa.String(length=300), nullable=False),
        sa.Column("created_at", UTCDateTime(), nullable=False),
        sa.Column("expires_at", UTCDateTime(), nullable=False),
        sa.Column("used_at", UTCDateTime(), nullable=True),
    )
    op.create_index("ix_embed_tokens_expires", "embed_tokens", ["expires_at"])


def downgrade() -> None:
    op.drop_index("ix_embed_tokens_expires", table_name="embed_tokens")
    op.drop_table("embed_tokens")
