"""The surface each vote was cast on ("web", "slack", "telegram", "cli"), so a quorum's record
can say where every vote came from, not only who cast it and when. Votes cast before this
revision get theirs from the audit event that recorded them.

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-04 09:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0011"
down_revision: str | None = "0010"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# Each vote with the actor ("web:alice") of the events recorded with it: the same moment on the
# same request, a vote towards the quorum or the decision it made.
_VOTE_ACTORS = sa.text(
    "SELECT v.approval_id, v.principal, e.actor FROM votes v JOIN approval_events e"
    " ON e.approval_id = v.approval_id AND e.at = v.at"
    " AND e.type IN ('voted', 'approved', 'rejected')"
)
_SET_VIA = sa.text(
    "UPDATE votes SET via = :via WHERE approval_id = :approval_id AND principal = :principal"
)


def upgrade() -> None:
    with op.batch_alter_table("votes", schema=None) as batch:
        batch.add_column(sa.Column("via", sa.String(length=32), nullable=True))
    bind = op.get_bind()
    for approval_id, principal, actor in bind.execute(_VOTE_ACTORS).all():
        via, _, who = (actor or "").partition(":")
        if via and who == principal:
            bind.execute(_SET_VIA, {"via": via, "approval_id": approval_id, "principal": principal})


def downgrade() -> None:
    with op.batch_alter_table("votes", schema=None) as batch:
        batch.drop_column("via")
