"""Cluster mode: the newest fencing token each session's writes were made under.

Revision ID: r08
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "r08"
down_revision = "r07"
branch_labels = None
depends_on = None


def upgrade() -> None:
    if not sa.inspect(op.get_bind()).has_table("session_fence"):
        op.create_table(
            "session_fence",
            sa.Column("session_key", sa.String(512), primary_key=True),
            sa.Column("token", sa.BigInteger(), nullable=False),
            sa.Column("updated_at", sa.Float(), nullable=False),
        )
