"""Exactly-once delivery: the part whose send began last and what it comes after, so a replay
knows which part may or may not have gone out.

Revision ID: r09
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "r09"
down_revision = "r08"
branch_labels = None
depends_on = None


def upgrade() -> None:
    have = {c["name"] for c in sa.inspect(op.get_bind()).get_columns("inbox")}
    if "sending" not in have:
        op.add_column("inbox", sa.Column("sending", sa.Integer(), nullable=True))
    if "sending_after" not in have:
        op.add_column("inbox", sa.Column("sending_after", sa.String(128), nullable=True))
