"""The database schema (SQLAlchemy 2 declarative): sessions, their messages, the inbox,
pairing, scheduled jobs with their run ledger, the long-term memory archive, and the fencing
tokens of cluster session leases."""

from __future__ import annotations

from sqlalchemy import (
    BigInteger,
    Float,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    String,
    Text,
    UniqueConstraint,
    text,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column


class Base(DeclarativeBase):
    pass


class SessionRow(Base):
    """One conversation; `/new` closes the current row for a key and opens another."""

    __tablename__ = "sessions"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    key: Mapped[str] = mapped_column(String(512), index=True)
    created_at: Mapped[float] = mapped_column(Float)
    closed_at: Mapped[float | None] = mapped_column(Float, nullable=True)


class MessageRow(Base):
    """One chat-completions message of a session, stored whole per completed turn."""

    __tablename__ = "messages"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    session_id: Mapped[int] = mapped_column(ForeignKey("sessions.id"), index=True)
    role: Mapped[str] = mapped_column(String(16))
    content: Mapped[str | None] = mapped_column(Text, nullable=True)
    tool_calls: Mapped[str | None] = mapped_column(Text, nullable=True)  # JSON
    tool_call_id: Mapped[str | None] = mapped_column(String(128), nullable=True)
    run_id: Mapped[str] = mapped_column(String(64), default="")
    created_at: Mapped[float] = mapped_column(Float)
    # whose turn it is ("" when a turn merged several users' messages, or made before this
    # column): `session_search` in a session several users share shows each only their own
    user_id: Mapped[str] = mapped_column(String(128), default="", server_default=text("''"))


class InboxRow(Base):
    """Every accepted inbound message, written before it is processed.

    status: accepted -> done (turn and reply stored, not yet confirmed sent: re-sent at the
    next start) -> answered; or dropped (the user was told why not), undeliverable (the
    platform refuses us: blocked, chat gone), expired (too old to replay at start),
    quarantined (shown to take the process down `store.quarantine_after` times: not replayed
    until an operator retries it, back to accepted, or drops it).

    parts_sent: how many parts of a reply split into several messages went out (the next
    attempt resumes after them; a reply's files are parts after its text). reply_files: those
    files (JSON), so a replay sends them too. preview: where the run's live preview message is
    (a message id, a Slack ts), so a replay after a crash finishes it instead of leaving it
    half-written.
    sending, sending_after: the part whose send began last (recorded before it can reach the
    platform) and the platform reference it comes after; a replay finding ``sending ==
    parts_sent`` cannot tell whether that part went out, and has the adapter check first.
    in_flight: a run works on the entry now (1), or a probation run, where it is the one
    suspect in flight in the gateway (2); committed before the run works on it, 0 again after
    a clean stop. suspect: it was in flight at a crash nothing explained, so it runs on
    probation. attempts: crashes shown to be the entry's (one during its probation run), so a
    crash loop shows as a growing count; see docs/quarantine.md.
    Columns added after the first release carry a server default or are nullable: opening an
    older database adds them (a revision in `migrations/versions/`).
    """

    __tablename__ = "inbox"
    __table_args__ = (
        UniqueConstraint("platform", "chat_id", "message_id", name="uq_inbox_message"),
        Index("ix_inbox_status", "status"),
    )
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    platform: Mapped[str] = mapped_column(String(32))
    chat_id: Mapped[str] = mapped_column(String(128))
    message_id: Mapped[str] = mapped_column(String(128))
    session_key: Mapped[str] = mapped_column(String(512))
    payload: Mapped[str] = mapped_column(Text)  # the MessageEvent as JSON
    status: Mapped[str] = mapped_column(String(16), default="accepted")
    accepted_at: Mapped[float] = mapped_column(Float)
    updated_at: Mapped[float] = mapped_column(Float)
    run_id: Mapped[str] = mapped_column(String(64), default="")
    reply: Mapped[str | None] = mapped_column(Text, nullable=True)
    parts_sent: Mapped[int] = mapped_column(Integer, default=0, server_default=text("0"))
    preview: Mapped[str | None] = mapped_column(String(128), nullable=True)
    attempts: Mapped[int] = mapped_column(Integer, default=0, server_default=text("0"))
    in_flight: Mapped[int] = mapped_column(Integer, default=0, server_default=text("0"))
    suspect: Mapped[int] = mapped_column(Integer, default=0, server_default=text("0"))
    sending: Mapped[int | None] = mapped_column(Integer, nullable=True)
    sending_after: Mapped[str | None] = mapped_column(String(128), nullable=True)
    reply_files: Mapped[str | None] = mapped_column(Text, nullable=True)
    # the message's W3C traceparent when traces were on at intake (docs/traces.md)
    trace: Mapped[str | None] = mapped_column(String(64), nullable=True)


class PairingRow(Base):
    """A DM pairing request (status pending) or an approved user (status approved)."""

    __tablename__ = "pairing"
    __table_args__ = (UniqueConstraint("platform", "user_id", name="uq_pairing_user"),)
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    platform: Mapped[str] = mapped_column(String(32))
    user_id: Mapped[str] = mapped_column(String(128))
    user_name: Mapped[str] = mapped_column(String(256), default="")
    chat_id: Mapped[str] = mapped_column(String(128), default="")
    code: Mapped[str] = mapped_column(String(16), default="")
    status: Mapped[str] = mapped_column(String(16))
    created_at: Mapped[float] = mapped_column(Float)
    approved_at: Mapped[float | None] = mapped_column(Float, nullable=True)


class CronJobRow(Base):
    """A scheduled job's definition, and `next_run_at`: its earliest slot not yet claimed.

    kind/anchor/every_s: the schedule as parsed (`schedule` as the user gave it); state:
    active | paused | done (a one-shot that ran, a repeat count reached) | missed (a one-shot
    whose slot passed beyond its grace while the gateway was down). Slots are epoch seconds.
    """

    __tablename__ = "cron_jobs"
    __table_args__ = (Index("ix_cron_jobs_due", "state", "next_run_at"),)
    id: Mapped[str] = mapped_column(String(16), primary_key=True)
    name: Mapped[str] = mapped_column(String(200))
    prompt: Mapped[str] = mapped_column(Text)
    schedule: Mapped[str] = mapped_column(String(200))
    kind: Mapped[str] = mapped_column(String(8))
    timezone: Mapped[str] = mapped_column(String(64))
    anchor: Mapped[int] = mapped_column(BigInteger)
    every_s: Mapped[int] = mapped_column(Integer)
    deliver: Mapped[str] = mapped_column(String(300))
    origin_platform: Mapped[str] = mapped_column(String(32))
    origin_chat_type: Mapped[str] = mapped_column(String(16))
    origin_chat_id: Mapped[str] = mapped_column(String(128))
    origin_thread_id: Mapped[str | None] = mapped_column(String(128), nullable=True)
    origin_user_id: Mapped[str] = mapped_column(String(128))
    created_by: Mapped[str] = mapped_column(String(16))
    state: Mapped[str] = mapped_column(String(16))
    next_run_at: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    repeat: Mapped[int | None] = mapped_column(Integer, nullable=True)
    runs: Mapped[int] = mapped_column(Integer)
    catch_up: Mapped[str] = mapped_column(String(8))
    grace_s: Mapped[float | None] = mapped_column(Float, nullable=True)
    timeout_s: Mapped[float | None] = mapped_column(Float, nullable=True)
    created_at: Mapped[float] = mapped_column(Float)
    updated_at: Mapped[float] = mapped_column(Float)


class CronRunRow(Base):
    """One slot of a job, claimed before it runs: the unique `(job_id, scheduled_for)` makes a
    second claim fail. status: claimed -> running -> succeeded | failed | timed_out, or
    abandoned (its lease expired: the process died); skipped and missed record slots that did
    not run. delivery: pending | delivered | failed | skipped, apart from the run's status.
    """

    __tablename__ = "cron_runs"
    __table_args__ = (
        UniqueConstraint("job_id", "scheduled_for", name="uq_cron_runs_slot"),
        Index("ix_cron_runs_status", "status"),
    )
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    job_id: Mapped[str] = mapped_column(String(16))
    scheduled_for: Mapped[int] = mapped_column(BigInteger)
    kind: Mapped[str] = mapped_column(String(12))
    status: Mapped[str] = mapped_column(String(16))
    owner: Mapped[str] = mapped_column(String(128))
    lease_until: Mapped[float] = mapped_column(Float)
    claimed_at: Mapped[float] = mapped_column(Float)
    started_at: Mapped[float | None] = mapped_column(Float, nullable=True)
    finished_at: Mapped[float | None] = mapped_column(Float, nullable=True)
    missed: Mapped[int] = mapped_column(Integer)
    delivery: Mapped[str] = mapped_column(String(16))
    parts_sent: Mapped[int] = mapped_column(Integer)
    output: Mapped[str | None] = mapped_column(Text, nullable=True)
    error: Mapped[str | None] = mapped_column(Text, nullable=True)
    # as on `InboxRow`: the part whose send began last, and the platform reference before it
    sending: Mapped[int | None] = mapped_column(Integer, nullable=True)
    sending_after: Mapped[str | None] = mapped_column(String(128), nullable=True)
    # the files a succeeded run's answer sends after its text (JSON, as `InboxRow.reply_files`)
    output_files: Mapped[str | None] = mapped_column(Text, nullable=True)


class MemoryRow(Base):
    """One memory of the long-term archive, in a bank (one per user, or one shared).

    `embedding` is the text's unit vector as float32 bytes (None until an embeddings endpoint
    answered); `session_key`, `message_id` and `created_at` say where it came from. The
    keyword index (SQLite FTS5 table, PostgreSQL GIN index) is made beside the table by the
    migration `r07` (`hermes_gateway/store/archive_index.py`).
    """

    __tablename__ = "memories"
    # recency is by id (rows are only appended): the newest of a bank, and its latest rows,
    # come straight from this index
    __table_args__ = (Index("ix_memories_bank", "bank", "id"),)
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    bank: Mapped[str] = mapped_column(String(256))
    content: Mapped[str] = mapped_column(Text)
    context: Mapped[str] = mapped_column(Text, default="", server_default=text("''"))
    tags: Mapped[str] = mapped_column(Text, default="", server_default=text("''"))
    session_key: Mapped[str] = mapped_column(String(512), default="", server_default=text("''"))
    message_id: Mapped[str] = mapped_column(String(128), default="", server_default=text("''"))
    created_at: Mapped[float] = mapped_column(Float)
    embedding: Mapped[bytes | None] = mapped_column(LargeBinary, nullable=True)
    model: Mapped[str] = mapped_column(String(128), default="", server_default=text("''"))


class FenceRow(Base):
    """The newest fencing token a write for a session was made under (cluster mode only).

    A write carrying a lower token comes from an instance whose lease on the session has
    since passed to another (it was paused past its expiry): the store refuses it.
    """

    __tablename__ = "session_fence"
    session_key: Mapped[str] = mapped_column(String(512), primary_key=True)
    token: Mapped[int] = mapped_column(BigInteger)
    updated_at: Mapped[float] = mapped_column(Float)
