"""Decisions beyond yes and no: questions for a person, answers instead of running a call,
and calls approved as edited (the arguments and hash the agent asked for kept beside the
revision that was approved), with the JSON Schema an edit must satisfy. Existing requests
get NULL in every new column: none of them is a question, answered or edited.

Revision ID: 0012
Revises: 0011
Create Date: 2026-12-02 14:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0012"
down_revision: str | None = "0011"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_COLUMNS = (
    ("question", sa.JSON()),
    ("answer", sa.JSON()),
    ("input_schema", sa.JSON()),
    ("original_args", sa.JSON()),
    ("original_hash", sa.String(length=64)),
)
_EDITED = sa.text("original_hash IS NOT NULL")


# Plain ALTER TABLE ADD / DROP COLUMN on both databases (SQLite has had DROP COLUMN since
# 3.35): batch mode would rebuild `approvals` on SQLite, which the foreign keys of its audit
# events, votes and outbox jobs refuse once it holds rows.


def upgrade() -> None:
    for name, type_ in _COLUMNS:
        op.add_column("approvals", sa.Column(name, type_, nullable=True))
    op.create_index(
        "ix_approvals_original",
        "approvals",
        ["tenant", "run_id", "original_hash"],
        unique=False,
        sqlite_where=_EDITED,
        postgresql_where=_EDITED,
    )


def downgrade() -> None:
    op.drop_index("ix_approvals_original", table_name="approvals")
    for name, _ in reversed(_COLUMNS):
        op.drop_column("approvals", name)
