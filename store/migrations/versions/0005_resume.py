"""Resume: the claim's idempotency key, the step a request belongs to (the newest request of
a step supersedes the older ones), which request superseded a request, and the follow-up an
outcome_unknown approval raised.

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-30 06:00:00
"""

import hashlib
import json
from collections.abc import Sequence

import rfc8785
import sqlalchemy as sa
from alembic import op

revision: str = "0005"
down_revision: str | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_LIVE = "state IN ('pending', 'approved')"
_FOLLOWS = "follow_up_id IS NOT NULL"


def upgrade() -> None:
    with op.batch_alter_table("approvals", schema=None) as batch_op:
        batch_op.add_column(sa.Column("claim_key", sa.String(length=64), nullable=True))
        batch_op.add_column(sa.Column("step_key", sa.String(length=64), nullable=True))
        batch_op.add_column(sa.Column("superseded_by", sa.String(length=36), nullable=True))
        batch_op.add_column(sa.Column("follow_up_id", sa.String(length=36), nullable=True))
        batch_op.create_index(
            "ix_approvals_step",
            ["tenant", "run_id", "step_key"],
            unique=False,
            sqlite_where=sa.text(_LIVE),
            postgresql_where=sa.text(_LIVE),
        )
        batch_op.create_index(
            "ix_approvals_follow_up",
            ["follow_up_id"],
            unique=False,
            sqlite_where=sa.text(_FOLLOWS),
            postgresql_where=sa.text(_FOLLOWS),
        )
    bind = op.get_bind()
    # Requests that can still be replaced get their step key, as new ones do at creation.
    live = bind.execute(
        sa.text(f"SELECT id, step FROM approvals WHERE step IS NOT NULL AND {_LIVE}")
    ).all()
    for approval_id, step in live:
        value = json.loads(step) if isinstance(step, str) else step
        if value is None:
            continue
        key = hashlib.sha256(rfc8785.dumps(value)).hexdigest()
        bind.execute(
            sa.text("UPDATE approvals SET step_key = :key WHERE id = :id"),
            {"key": key, "id": approval_id},
        )
    # The follow-up of a lapsed lease was only in its event; the record names it now.
    lapsed = bind.execute(
        sa.text("SELECT approval_id, data FROM approval_events WHERE type = 'lease_lapsed'")
    ).all()
    for approval_id, data in lapsed:
        follow_up = (json.loads(data) if isinstance(data, str) else data).get("follow_up_id")
        bind.execute(
            sa.text("UPDATE approvals SET follow_up_id = :f WHERE id = :id"),
            {"f": follow_up, "id": approval_id},
        )


def downgrade() -> None:
    with op.batch_alter_table("approvals", schema=None) as batch_op:
        batch_op.drop_index(
            "ix_approvals_follow_up",
            sqlite_where=sa.text(_FOLLOWS),
            postgresql_where=sa.text(_FOLLOWS),
        )
        batch_op.drop_index(
            "ix_approvals_step",
            sqlite_where=sa.text(_LIVE),
            postgresql_where=sa.text(_LIVE),
        )
        batch_op.drop_column("follow_up_id")
        batch_op.drop_column("superseded_by")
        batch_op.drop_column("step_key")
        batch_op.drop_column("claim_key")
