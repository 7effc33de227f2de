"""DM pairing: pending requests and approved users.

Revision ID: r02
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "r02"
down_revision = "r01"
branch_labels = None
depends_on = None


def upgrade() -> None:
    if sa.inspect(op.get_bind()).has_table("pairing"):
        return  # an unversioned database (see store_migrate) made by a release that had it
    op.create_table(
        "pairing",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column("platform", sa.String(32), nullable=False),
        sa.Column("user_id", sa.String(128), nullable=False),
        sa.Column("user_name", sa.String(256), nullable=False),
        sa.Column("chat_id", sa.String(128), nullable=False),
        sa.Column("code", sa.String(16), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("created_at", sa.Float(), nullable=False),
        sa.Column("approved_at", sa.Float(), nullable=True),
        sa.UniqueConstraint("platform", "user_id", name="uq_pairing_user"),
    )
