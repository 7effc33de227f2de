"""Scheduled jobs: their definitions (`cron_jobs`) and the run ledger (`cron_runs`), one row
per claimed slot, unique on (job_id, scheduled_for).

Revision ID: r06
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "r06"
down_revision = "r05"
branch_labels = None
depends_on = None


def _strings(*spec: tuple[str, int]) -> list[sa.Column[str]]:
    return [sa.Column(name, sa.String(n), nullable=False) for name, n in spec]


def upgrade() -> None:
    have = sa.inspect(op.get_bind())
    if not have.has_table("cron_jobs"):
        op.create_table(
            "cron_jobs",
            sa.Column("id", sa.String(16), primary_key=True),
            sa.Column("name", sa.String(200), nullable=False),
            sa.Column("prompt", sa.Text(), nullable=False),
            *_strings(("schedule", 200), ("kind", 8), ("timezone", 64)),
            sa.Column("anchor", sa.BigInteger(), nullable=False),
            sa.Column("every_s", sa.Integer(), nullable=False),
            *_strings(("deliver", 300), ("origin_platform", 32), ("origin_chat_type", 16)),
            sa.Column("origin_chat_id", sa.String(128), nullable=False),
            sa.Column("origin_thread_id", sa.String(128), nullable=True),
            *_strings(("origin_user_id", 128), ("created_by", 16), ("state", 16)),
            sa.Column("next_run_at", sa.BigInteger(), nullable=True),
            sa.Column("repeat", sa.Integer(), nullable=True),
            sa.Column("runs", sa.Integer(), nullable=False),
            sa.Column("catch_up", sa.String(8), nullable=False),
            sa.Column("grace_s", sa.Float(), nullable=True),
            sa.Column("timeout_s", sa.Float(), nullable=True),
            sa.Column("created_at", sa.Float(), nullable=False),
            sa.Column("updated_at", sa.Float(), nullable=False),
        )
        op.create_index("ix_cron_jobs_due", "cron_jobs", ["state", "next_run_at"])
    if not have.has_table("cron_runs"):
        op.create_table(
            "cron_runs",
            sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True),
            sa.Column("job_id", sa.String(16), nullable=False),
            sa.Column("scheduled_for", sa.BigInteger(), nullable=False),
            *_strings(("kind", 12), ("status", 16), ("owner", 128)),
            sa.Column("lease_until", sa.Float(), nullable=False),
            sa.Column("claimed_at", sa.Float(), nullable=False),
            sa.Column("started_at", sa.Float(), nullable=True),
            sa.Column("finished_at", sa.Float(), nullable=True),
            sa.Column("missed", sa.Integer(), nullable=False),
            sa.Column("delivery", sa.String(16), nullable=False),
            sa.Column("parts_sent", sa.Integer(), nullable=False),
            sa.Column("output", sa.Text(), nullable=True),
            sa.Column("error", sa.Text(), nullable=True),
            sa.UniqueConstraint("job_id", "scheduled_for", name="uq_cron_runs_slot"),
        )
        op.create_index("ix_cron_runs_status", "cron_runs", ["status"])
