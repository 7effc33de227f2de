"""Poison told from bad luck: whether a run is working on an inbox entry now (and whether it
runs on probation, the one suspect in flight), and whether the entry was in flight at a crash
nothing explained. `attempts` from here on counts only crashes shown to be the entry's.

Revision ID: r12
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "r12"
down_revision = "r11"
branch_labels = None
depends_on = None


def upgrade() -> None:
    have = {c["name"] for c in sa.inspect(op.get_bind()).get_columns("inbox")}
    for name in ("in_flight", "suspect"):
        if name not in have:
            op.add_column(
                "inbox", sa.Column(name, sa.Integer(), nullable=False, server_default="0")
            )
