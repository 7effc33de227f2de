"""The cluster's `Peers` for the local API: a request taken by any instance is answered by the
instance that runs its session, and carried back. `Carry.take` runs an inbox entry here when
this instance owns the session (or takes it now), finds it answered, or names its owner."""

from __future__ import annotations

from collections.abc import AsyncGenerator, Awaitable, Callable, Mapping
from typing import Any, Protocol

from hermes_gateway.cluster.peers import PeerLink
from hermes_gateway.errors import CoordinationUnavailable, RequestError, StoreError
from hermes_gateway.events import MessageEvent
from hermes_gateway.platforms.peers import Whereabouts
from hermes_gateway.store.store import Store

Route = Callable[[MessageEvent, int | None], Awaitable[None]]


class Holder(Protocol):
    """The session leases of this instance (`Ownership`)."""

    def held(self, key: str) -> bool: ...

    async def own(self, key: str) -> bool: ...

    def instances(self) -> list[str]: ...


class Carry:
    """`hermes_gateway.platforms.peers.Peers` over the session leases and the shared inbox."""

    def __init__(
        self,
        link: PeerLink,
        holder: Holder,
        store: Store,
        knows: Callable[[str, int], bool],
        route_here: Route,
    ) -> None:
        self.link = link
        self.holder = holder
        self.store = store
        self.knows = knows  # the runner has the entry (running, or waiting its turn)
        self.route_here = route_here  # as on one process: a command, else the runner

    @property
    def instance(self) -> str:
        return self.link.me

    @property
    def lease_s(self) -> float:
        return self.link.coordinator.lease_s

    async def start(self) -> None:
        await self.link.start()

    async def close(self) -> None:
        await self.link.close()

    def holds(self, session_key: str) -> bool:
        return self.holder.held(session_key)

    def others(self) -> list[str]:
        return [name for name in self.holder.instances() if name != self.instance]

    async def entry(self, event: MessageEvent) -> int | None:
        try:
            return await self.store.entry_of(event)
        except StoreError:
            return None

    async def take(self, session_key: str, inbox_id: int) -> Whereabouts:
        """Under the session's lease (taken now if free; its token recorded before the entry
        is read, like every route) the entry is run here unless it is here already."""
        try:
            if not await self.holder.own(session_key):
                owner = await self.link.coordinator.owner(session_key)
                return Whereabouts("elsewhere", owner=owner)
        except CoordinationUnavailable as exc:
            return Whereabouts("unavailable", why=str(exc))
        if self.knows(session_key, inbox_id):
            return Whereabouts("here")
        try:
            event = await self.store.accepted(inbox_id)
            if event is None:  # answered meanwhile (by whichever instance ran it)
                return await self._settled(session_key, inbox_id)
        except StoreError as exc:
            return Whereabouts("unavailable", why=str(exc))
        if event.session_key != session_key:  # a peer names the session it asks about
            raise RequestError(400, "inbox entry of another session", "invalid_request_error")
        await self.route_here(event, inbox_id)
        return Whereabouts("here")

    async def _settled(self, session_key: str, inbox_id: int) -> Whereabouts:
        found = await self.store.settled(inbox_id)
        if found is None or found[0] != session_key:
            raise RequestError(400, "no such inbox entry of this session", "invalid_request_error")
        _, status, reply, run_id = found
        return Whereabouts("answered", status=status, reply=reply, run_id=run_id)

    def call(
        self, to: str, path: str, body: Mapping[str, Any], read_s: float
    ) -> AsyncGenerator[dict[str, Any], None]:
        return self.link.call(to, path, body, read_s)

    def verify(self, headers: Mapping[str, str], path: str, body: bytes) -> str:
        return self.link.verify(headers, path, body)
