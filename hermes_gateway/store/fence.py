"""Fencing tokens: a session write made under a cluster lease carries the lease's token, and
the store refuses it, in the write's own transaction, once a newer token has been seen."""

from __future__ import annotations

from typing import Any, NamedTuple, cast

from sqlalchemy import Table, text

from hermes_gateway.errors import FencedOut
from hermes_gateway.store.executor import Executor
from hermes_gateway.store.models import FenceRow

_TABLE = cast(Table, FenceRow.__table__).name
# One statement on both engines (SQLite >= 3.24, PostgreSQL >= 9.5): a first token is stored,
# an equal or newer one replaces it, an older one changes nothing, so zero rows means stale.
# PostgreSQL's row lock orders two writers of one session: the older commits first or fails.
_UPSERT = text(
    f"INSERT INTO {_TABLE} (session_key, token, updated_at) VALUES (:k, :t, :now) "
    f"ON CONFLICT (session_key) DO UPDATE SET token = excluded.token, "
    f"updated_at = excluded.updated_at WHERE {_TABLE}.token <= excluded.token"
)


class Fence(NamedTuple):
    """A write's claim to a session: the lease's fencing token."""

    session_key: str
    token: int


def refuse(fence: Fence) -> FencedOut:
    return FencedOut(
        f"session {fence.session_key!r}: token {fence.token} is stale (another instance owns it)"
    )


def warm_up() -> list[tuple[Any, dict[str, Any]]]:
    """The fencing statement, shaped as `check` runs it (`hotpath.warm_up`)."""
    return [(_UPSERT, {"k": "", "t": 0, "now": 0.0})]


def check(db: Executor, fence: Fence, now: float) -> None:
    """Record ``fence`` in the open transaction, or raise `FencedOut` (rolling it back)."""
    if db.execute(_UPSERT, {"k": fence.session_key, "t": fence.token, "now": now}) != 1:
        raise refuse(fence)
