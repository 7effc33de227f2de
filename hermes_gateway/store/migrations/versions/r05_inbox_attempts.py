"""The crash-loop guard: runs started on an inbox entry that never ended.

Revision ID: r05
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "r05"
down_revision = "r04"
branch_labels = None
depends_on = None


def upgrade() -> None:
    have = {c["name"] for c in sa.inspect(op.get_bind()).get_columns("inbox")}
    if "attempts" not in have:
        op.add_column(
            "inbox", sa.Column("attempts", sa.Integer(), nullable=False, server_default="0")
        )
