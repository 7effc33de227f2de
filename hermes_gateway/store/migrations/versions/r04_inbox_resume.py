"""Resumable replies: how many parts of a reply went out, and where its live preview is.

Revision ID: r04
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "r04"
down_revision = "r03"
branch_labels = None
depends_on = None


def upgrade() -> None:
    have = {c["name"] for c in sa.inspect(op.get_bind()).get_columns("inbox")}
    if "parts_sent" not in have:
        op.add_column(
            "inbox", sa.Column("parts_sent", sa.Integer(), nullable=False, server_default="0")
        )
    if "preview" not in have:
        op.add_column("inbox", sa.Column("preview", sa.String(128), nullable=True))
