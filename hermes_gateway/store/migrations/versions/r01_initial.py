"""The first release's schema: sessions, their messages, and the inbox.

Revision ID: r01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "r01"
down_revision: str | None = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    # an unversioned database (see store_migrate) has some or all of these already
    have = set(sa.inspect(op.get_bind()).get_table_names())
    if "sessions" not in have:
        _sessions()
    if "messages" not in have:
        _messages()
    if "inbox" not in have:
        _inbox()


def _sessions() -> None:
    op.create_table(
        "sessions",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column("key", sa.String(512), nullable=False),
        sa.Column("created_at", sa.Float(), nullable=False),
        sa.Column("closed_at", sa.Float(), nullable=True),
    )
    op.create_index("ix_sessions_key", "sessions", ["key"])


def _messages() -> None:
    op.create_table(
        "messages",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column("session_id", sa.Integer(), sa.ForeignKey("sessions.id"), nullable=False),
        sa.Column("role", sa.String(16), nullable=False),
        sa.Column("content", sa.Text(), nullable=True),
        sa.Column("tool_calls", sa.Text(), nullable=True),
        sa.Column("tool_call_id", sa.String(128), nullable=True),
        sa.Column("run_id", sa.String(64), nullable=False),
        sa.Column("created_at", sa.Float(), nullable=False),
    )
    op.create_index("ix_messages_session_id", "messages", ["session_id"])


def _inbox() -> None:
    op.create_table(
        "inbox",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column("platform", sa.String(32), nullable=False),
        sa.Column("chat_id", sa.String(128), nullable=False),
        sa.Column("message_id", sa.String(128), nullable=False),
        sa.Column("session_key", sa.String(512), nullable=False),
        sa.Column("payload", sa.Text(), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("accepted_at", sa.Float(), nullable=False),
        sa.Column("updated_at", sa.Float(), nullable=False),
        sa.Column("run_id", sa.String(64), nullable=False),
        sa.Column("reply", sa.Text(), nullable=True),
        sa.UniqueConstraint("platform", "chat_id", "message_id", name="uq_inbox_message"),
    )
    op.create_index("ix_inbox_status", "inbox", ["status"])
