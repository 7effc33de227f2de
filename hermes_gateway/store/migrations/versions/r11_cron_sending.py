"""Exactly-once delivery of a scheduled job's answer: the part whose send began last and what it
comes after, on the run, so a delivery taken up again after a crash knows which part may or may
not have gone out (as `r09` does for chat replies).

Revision ID: r11
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "r11"
down_revision = "r10"
branch_labels = None
depends_on = None


def upgrade() -> None:
    have = {c["name"] for c in sa.inspect(op.get_bind()).get_columns("cron_runs")}
    if "sending" not in have:
        op.add_column("cron_runs", sa.Column("sending", sa.Integer(), nullable=True))
    if "sending_after" not in have:
        op.add_column("cron_runs", sa.Column("sending_after", sa.String(128), nullable=True))
