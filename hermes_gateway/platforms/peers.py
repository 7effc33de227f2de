"""What a platform whose answer can only go back on the request's own connection (the local API)
is offered in a cluster: where a request's inbox entry is answered, signed calls to the other
instances, and the check of a call from one (docs/cluster.md, "The local API in a cluster")."""

from __future__ import annotations

from collections.abc import AsyncGenerator, Mapping
from dataclasses import dataclass
from typing import Any, Literal, Protocol, runtime_checkable

from hermes_gateway.events import MessageEvent

Where = Literal["here", "answered", "elsewhere", "unavailable"]


@dataclass(frozen=True, slots=True)
class Whereabouts:
    """Where an inbox entry is answered: ``here`` (this instance runs it, or has it waiting:
    its answer comes as a local one does), ``answered`` (already: ``status`` and the stored
    ``reply`` and ``run_id``), ``elsewhere`` (``owner`` runs its session; None: nobody, for
    a moment) or ``unavailable`` (coordination or the store is down: ``why``)."""

    where: Where
    owner: str | None = None
    status: str = ""
    reply: str = ""
    run_id: str = ""
    why: str = ""


class Peers(Protocol):
    """The cluster's instances as one platform adapter sees them. None on one process."""

    @property
    def instance(self) -> str:
        """This instance's id."""
        ...

    @property
    def lease_s(self) -> float: ...

    async def start(self) -> None:
        """Publish this instance's address, so the others can carry requests to it."""
        ...

    async def close(self) -> None: ...

    def holds(self, session_key: str) -> bool:
        """This instance holds the session's lease (what it runs is answered here)."""
        ...

    async def take(self, session_key: str, inbox_id: int) -> Whereabouts:
        """Run the entry here if this instance owns the session or can take it now (once:
        an entry already here is not run again), else say where it is answered."""
        ...

    def others(self) -> list[str]:
        """The other instances alive at the last look at the cluster (every few seconds)."""
        ...

    async def entry(self, event: MessageEvent) -> int | None:
        """The inbox id under which ``event`` (same platform, chat and message id) was stored,
        by whichever instance took it; None if there is none or the store cannot say."""
        ...

    def call(
        self, to: str, path: str, body: Mapping[str, Any], read_s: float
    ) -> AsyncGenerator[dict[str, Any], None]:
        """A signed POST to instance ``to``; yields the JSON lines of its answer. Raises
        `PeerUnreachable` (not published, refused, cut off, or silent for ``read_s``)."""
        ...

    def verify(self, headers: Mapping[str, str], path: str, body: bytes) -> str:
        """The instance that signed this call to this one; `RequestError` 401 otherwise."""
        ...


@runtime_checkable
class Follower(Protocol):
    """An adapter that can wait on its request's own connection for an answer computed on
    another instance (the local API)."""

    def follow(self, event: MessageEvent, inbox_id: int) -> None:
        """``event``, stored as ``inbox_id``, is for a session another instance runs: have it
        answered there and bring the answer back (returns at once)."""
        ...
