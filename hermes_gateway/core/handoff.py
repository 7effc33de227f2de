"""The runner's side of cluster mode: what `hermes_gateway.core.ownership.Ownership` asks of
it (is an inbox entry here, is a session idle) and how it gives a session up when its lease is
lost. A base class of `GatewayRunner`, apart so the runner's own module stays about runs."""

from __future__ import annotations

import asyncio
from typing import Any

from hermes_gateway.agents.cache import AgentCache
from hermes_gateway.core.run import Run, inbox_ids
from hermes_gateway.core.sessions import Pending, SessionTable
from hermes_gateway.store.store import Store


class ClusterSide:
    """Reads and drops the runner's session state; `GatewayRunner` provides what it uses."""

    _table: SessionTable[Run]
    _persisting: dict[str, asyncio.Task[Any]]  # a stopped turn still being written
    agents: AgentCache
    store: Store

    def _background(self, coro: Any) -> asyncio.Task[Any]:
        raise NotImplementedError  # GatewayRunner._background

    def abandon(self, run: Run, *, record: bool = True) -> None:
        raise NotImplementedError  # GatewayRunner.abandon

    def relinquish(self, key: str) -> list[Pending]:
        """Cluster mode: the session's lease was lost. Its run and what waits are dropped here,
        silently and with nothing written: the session's next owner answers them from the inbox.
        Returns what was dropped (the run's messages, then those waiting)."""
        run = self._table.active(key)
        dropped = [*(run.items if run is not None else []), *self._table.pop_all(key)]
        if run is not None:
            self.abandon(run, record=False)
            self._table.release(key, run)
            # given up, not crashed: its attempt must not count toward quarantine
            self._background(self.store.undo_attempt(inbox_ids(run.items)))
        self.agents.evict(key)  # its history may hold a turn the store refused
        return dropped

    def extend(self, key: str, until: float) -> None:
        """The session's lease was renewed: its run may go on calling the model until then."""
        run = self._table.active(key)
        if run is not None:
            run.control.expire_at(until)

    def knows(self, key: str, inbox_id: int) -> bool:
        """Whether the entry is in the session's active run or waits in its pending slot."""
        run = self._table.active(key)
        ran = [] if run is None else run.items + run.carried + run.steered
        return any(p.inbox_id == inbox_id for p in ran + self._table.pending(key))

    def new_here(self, items: list[Pending]) -> list[Pending]:
        """``items`` less the entries already here: one entry can arrive twice (a takeover's
        replay and a "queued" notice each check `knows`, then await the store), and a second
        copy would run it twice. No await between this and the hand-over: atomic."""
        return [
            p
            for p in items
            if p.inbox_id is None or not self.knows(p.event.session_key, p.inbox_id)
        ]

    def idle(self, key: str) -> bool:
        """Nothing runs, waits or is still being written for the session."""
        table = self._table
        return (
            table.active(key) is None
            and not table.pending_count(key)
            and key not in self._persisting
        )
