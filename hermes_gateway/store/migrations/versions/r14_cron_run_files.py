"""The files a scheduled job's answer sends after its text (`send_file`), kept with the run's
output so a delivery taken over after a crash sends them too: a JSON list of
{path, name, caption, kind}, NULL for an answer without.

Revision ID: r14
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "r14"
down_revision = "r13"
branch_labels = None
depends_on = None


def upgrade() -> None:
    have = {c["name"] for c in sa.inspect(op.get_bind()).get_columns("cron_runs")}
    if "output_files" not in have:
        op.add_column("cron_runs", sa.Column("output_files", sa.Text(), nullable=True))
