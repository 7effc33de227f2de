"""The files a reply sends after its text (`send_file`), kept with the reply so a replay after a
crash sends them too: a JSON list of {path, name, caption, kind}, NULL for a reply without.

Revision ID: r13
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "r13"
down_revision = "r12"
branch_labels = None
depends_on = None


def upgrade() -> None:
    have = {c["name"] for c in sa.inspect(op.get_bind()).get_columns("inbox")}
    if "reply_files" not in have:
        op.add_column("inbox", sa.Column("reply_files", sa.Text(), nullable=True))
