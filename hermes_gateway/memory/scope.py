"""Whose memory a session sees: the user a session belongs to (a DM, or a group session per
user), the user a run answers, their archive bank, and the notice about a `MEMORY.md` left from
before memory was kept per user."""

from __future__ import annotations

from pathlib import Path

from hermes_gateway.events import MessageEvent
from tools.memory import FILE_NAME, USERS_DIR, read_entries

SHARED_BANK = "shared"


def user_ref(event: MessageEvent) -> str:
    """``<platform>/<user id>``: one person on one platform."""
    return f"{event.platform}/{event.user_id}"


def sole_user(event: MessageEvent) -> bool:
    """The session of ``event`` belongs to its sender alone: a DM, or a group or channel
    session kept per user. A thread, or a group shared by its members, is not anyone's."""
    if event.chat_type == "dm":
        return True
    return (
        event.chat_type in ("group", "channel")
        and not event.thread_id
        and event.session_key.endswith(":" + event.user_id)
    )


def bank_of(event: MessageEvent, scope: str) -> str:
    return user_ref(event) if scope == "user" else SHARED_BANK


def user_bank(ref: str) -> str:
    """The archive bank of ``PLATFORM:USER`` (or ``PLATFORM/USER``), as an operator names a
    person; a `ValueError` saying the form for anything else. Split at the first separator:
    platform names have neither, user ids may (Matrix's ``@a:server``)."""
    cut = min((i for i in (ref.find(":"), ref.find("/")) if i > 0), default=-1)
    platform, user = (ref[:cut].strip(), ref[cut + 1 :].strip()) if cut > 0 else ("", "")
    if not platform or not user:
        raise ValueError(f"a user is PLATFORM:USER, e.g. telegram:123456789 (not {ref!r})")
    return f"{platform}/{user}"


def legacy_notice(home: Path, scope: str) -> str | None:
    """With per-user memory, a `<home>/MEMORY.md` from before is no longer shown to anyone: it
    is left where it is (never moved: whose it is cannot be known), and the operator is told
    how to hand it to its owner, or to keep the shared scope."""
    legacy = home / FILE_NAME
    if scope != "user" or not read_entries(legacy):
        return None
    return (
        f"{legacy} is from before memory was kept per user and is not shown to anyone now. "
        "To give it to its owner: `hermes memory claim <platform> <user id>` (e.g. telegram "
        f"123456789; it goes to {home / USERS_DIR}/<platform>/<user id>.md); or set "
        "memory.scope: shared to keep one memory for all."
    )
