"""The W3C traceparent of an inbox entry's `message` span (traces on), so the run a cluster's
owner or a replay after a restart makes of it finds its trace: NULL when traces were off.

Revision ID: r15
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "r15"
down_revision = "r14"
branch_labels = None
depends_on = None


def upgrade() -> None:
    have = {c["name"] for c in sa.inspect(op.get_bind()).get_columns("inbox")}
    if "trace" not in have:
        op.add_column("inbox", sa.Column("trace", sa.String(64), nullable=True))
