"""The port through which the runner runs each session under its lease: what it asks of the
leases (`SessionLeases`), what they ask of it (`LeaseHolder`), and the one-process leases.
`hermes_gateway/cluster/` implements it for a cluster; this package imports nothing of it."""

from __future__ import annotations

import math
from typing import Protocol

from hermes_gateway.core.sessions import Pending
from hermes_gateway.store.store import Fence


class LeaseHolder(Protocol):
    """The runner, as the leases see it: what runs or waits per session, and how a session
    is extended or given up when its lease is renewed or lost."""

    def knows(self, key: str, inbox_id: int) -> bool:
        """Whether the inbox entry is already here (running or waiting)."""
        ...

    def idle(self, key: str) -> bool:
        """Nothing runs, waits or is still being written for the session."""
        ...

    def extend(self, key: str, until: float) -> None:
        """The lease was renewed: the session's run may call the model until ``until``."""
        ...

    def relinquish(self, key: str) -> list[Pending]:
        """The lease was lost: the session's run and what waits are dropped, unwritten."""
        ...

    def forget(self, key: str) -> None:
        """The lease was let go (the session idle) or is newly taken: another instance may
        have run the session meanwhile, so what is cached of it is read again from the store."""
        ...


class SessionLeases(Protocol):
    """The leases the runner's sessions run under, given to it when it is built; the runner
    names itself their holder then (`bind`), the one time anything is told of it."""

    def bind(self, holder: LeaseHolder) -> None:
        """``holder`` runs the sessions: renewals extend its runs, losses relinquish them."""
        ...

    def fence_for(self, key: str) -> Fence | None:
        """The token a run of the session writes under (None: unfenced)."""
        ...

    def until(self, key: str) -> float:
        """Until when (monotonic) a run of the session may begin a model or tool call."""
        ...

    def lost(self, key: str) -> None:
        """A run found the session's lease ran out under it: the session is given up here."""
        ...


class SoleLeases:
    """One process: every session is its own, unfenced, for ever; nothing is ever lost."""

    def bind(self, holder: LeaseHolder) -> None:
        return None

    def fence_for(self, key: str) -> Fence | None:
        return None

    def until(self, key: str) -> float:
        return math.inf

    def lost(self, key: str) -> None:
        return None
