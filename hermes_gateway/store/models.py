"""The database schema (SQLAlchemy 2 declarative): sessions, their messages, the inbox, pairing,
and the fencing tokens of cluster session leases."""

from __future__ import annotations

from sqlalchemy import (
    BigInteger,
    Float,
    ForeignKey,
    Index,
    Integer,
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


class InboxRow(Base):
    """Every accepted inbound message, written before it is processed.

    status: accepted -> done (turn and reply stored, not yet confirmed sent: re-sent at the
    next start) -> answered; or dropped (the user was told why not), undeliverable (the
    platform refuses us: blocked, chat gone), expired (too old to replay at start),
    quarantined (in flight across `store.quarantine_after` crashes: not replayed until an
    operator retries it, back to accepted, or drops it).

    parts_sent: how many parts of a reply split into several messages went out (the next
    attempt resumes after them). preview: where the run's live preview message is (a message
    id, a Slack ts), so a replay after a crash finishes it instead of leaving it half-written.
    attempts: runs started on the entry that never ended (committed before the run works on
    it; a clean shutdown takes its count back), so a crash loop shows as a growing count.
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


class FenceRow(Base):
    """The newest fencing token a write for a session was made under (cluster mode only).

    A write carrying a lower token comes from an instance whose lease on the session has
    since passed to another (it was paused past its expiry): the store refuses it.
    """

    __tablename__ = "session_fence"
    session_key: Mapped[str] = mapped_column(String(512), primary_key=True)
    token: Mapped[int] = mapped_column(BigInteger)
    updated_at: Mapped[float] = mapped_column(Float)
