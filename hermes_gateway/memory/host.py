"""The archive and per-user memory as the tools see them: synchronous `ToolHost` callables for
worker threads, each hopping to the event loop for the store (the loop never waits on them).

The user is always the one whose message the session's run answers (`LiveRuns.
current_event`), so in a thread several people share, each reaches only their own memory.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import structlog

from agent_core import ModelError
from hermes_gateway.errors import StoreError
from hermes_gateway.events import MessageEvent
from hermes_gateway.memory.scope import bank_of, legacy_notice, sole_user, user_ref
from hermes_gateway.thread_hop import hop
from tools.errors import ToolError
from tools.hindsight import UNAVAILABLE
from tools.host import ForgetRequest, Forgotten, Recalled

if TYPE_CHECKING:
    from hermes_gateway.memory.service import MemoryService
    from hermes_gateway.store.store import Store

log = structlog.get_logger("hermes.memory")
NO_USER = "no user is known for this conversation right now"
OWNERS_KEPT = 10_000
PREVIEWS_KEPT = 1000  # queries shown by `hindsight_forget`, awaiting a confirm
NOT_SHOWN = (
    "confirm: true deletes only what this same query showed in this conversation, and it "
    "was not shown (or was already confirmed): call hindsight_forget with the query and "
    "without confirm first, check the memories it lists, then confirm or pass their ids"
)


class Runs(Protocol):
    """What memory reads of the runs in progress (`LiveRuns`): whose message a run answers."""

    def current_event(self, key: str) -> MessageEvent | None: ...


class MemoryHost:
    """One per gateway; `bind` it to the loop at startup."""

    def __init__(
        self,
        runs: Runs,
        service: MemoryService | None,
        store: Store,
        *,
        scope: str,
        timeout_s: float,
    ) -> None:
        self.runs = runs
        self.service = service
        self.store = store  # the operator's forget works with the archive service off too
        self.scope = scope
        self.timeout_s = timeout_s  # a hop: the store, plus embeddings (and extraction)
        self.legacy: str | None = None  # the notice about a MEMORY.md from before, if any
        self._owners: OrderedDict[str, str | None] = OrderedDict()  # loop thread only
        # (session, bank, query) -> the ids that query showed: what its confirm may delete
        self._shown: OrderedDict[tuple[str, str, str], tuple[int, ...]] = OrderedDict()
        self._loop: asyncio.AbstractEventLoop | None = None

    def bind(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop

    async def find_legacy(self, home: Path) -> None:
        """At startup: log (and show in /status) a shared MEMORY.md per-user memory no longer
        shows."""
        self.legacy = await asyncio.to_thread(legacy_notice, home, self.scope)
        if self.legacy is not None:
            log.warning("memory.legacy_file", detail=self.legacy)

    def status(self) -> dict[str, Any]:
        """For /status and `hermes status`."""
        service = self.service
        if service is None:
            embeddings = "archive off"
        elif service.embedder is None:
            embeddings = "not configured (keyword recall)"
        else:
            embeddings = "unavailable (keyword recall)" if service.embeddings_down else "ok"
        return {"scope": self.scope, "embeddings": embeddings, "legacy_memory_md": self.legacy}

    # -- on the loop ----------------------------------------------------------------------

    def owner(self, session_key: str) -> str | None:
        """The user a session belongs to alone (its prompt may carry their memory), else
        None; called when the session's agent is built: during its run, or after `/stop`
        (then the owner seen last is used)."""
        event = self.runs.current_event(session_key)
        if event is None:
            return self._owners.get(session_key)
        owner = user_ref(event) if sole_user(event) else None
        self._owners[session_key] = owner
        self._owners.move_to_end(session_key)
        if len(self._owners) > OWNERS_KEPT:
            self._owners.popitem(last=False)
        return owner

    def turn_done(self, event: MessageEvent, text: str, reply: str) -> None:
        """Settle's hook with `memory.auto_retain`: the turn goes to its user's bank."""
        if self.service is not None:
            self.service.turn_done(event, bank_of(event, self.scope), text, reply)

    def _asker(self, session_key: str) -> MessageEvent:
        event = self.runs.current_event(session_key)
        if event is None:
            raise ToolError(NO_USER)
        return event

    async def _user_of(self, session_key: str) -> str | None:
        event = self.runs.current_event(session_key)
        return user_ref(event) if event is not None else None

    async def _retain(
        self, session_key: str, content: str, context: str, tags: tuple[str, ...]
    ) -> str:
        from hermes_gateway.memory.service import Source  # loaded with the service (numpy)

        assert self.service is not None
        event = self._asker(session_key)
        source = Source(session_key, event.message_id)
        bank = bank_of(event, self.scope)
        return await self.service.retain(bank, content, context, tags, source)

    async def _recall(self, session_key: str, query: str, limit: int) -> Recalled:
        assert self.service is not None
        bank = bank_of(self._asker(session_key), self.scope)
        return await self.service.recall(bank, query, limit)

    async def _forget(self, session_key: str, ask: ForgetRequest) -> Forgotten:
        """Only ever in the bank of the user the run answers: ids of another bank are
        reported missing, like ids that never existed (nothing says which)."""
        assert self.service is not None
        bank = bank_of(self._asker(session_key), self.scope)
        if ask.ids:
            return await self._delete(bank, ask.ids)
        key = (session_key, bank, ask.query)
        if ask.confirm:
            shown = self._shown.pop(key, None)
            if shown is None:
                raise ToolError(NOT_SHOWN)
            return await self._delete(bank, shown)
        found = await self.service.matches(bank, ask.query, ask.limit)
        self._shown[key] = tuple(m.id for m in found.memories)
        self._shown.move_to_end(key)
        if len(self._shown) > PREVIEWS_KEPT:
            self._shown.popitem(last=False)
        return Forgotten(matched=found.memories, note=found.note)

    async def _delete(self, bank: str, ids: tuple[int, ...]) -> Forgotten:
        gone = await self.forget_bank(bank, list(ids))
        log.info("memory.forgotten", bank=bank, ids=gone, by="tool")
        return Forgotten(forgotten=tuple(gone), missing=tuple(i for i in ids if i not in gone))

    async def forget_bank(self, bank: str, ids: list[int] | None) -> list[int]:
        """Delete memories of ``bank`` (these ids, or all); the ids deleted. Through the
        service when the archive is on (its cached vectors go too), else the store alone."""
        if self.service is not None:
            return await self.service.archive.forget(bank, ids)
        from hermes_gateway.memory.archive import forget_rows  # numpy: only when asked

        return await forget_rows(self.store, bank, ids)

    # -- on a worker thread ---------------------------------------------------------------

    def user_of(self, session_key: str) -> str | None:
        found: str | None = self._hop(self._user_of(session_key))
        return found

    def retain(self, session_key: str, content: str, context: str, tags: tuple[str, ...]) -> str:
        self._archive()
        said: str = self._hop(self._retain(session_key, content, context, tags))
        return said

    def recall(self, session_key: str, query: str, limit: int) -> Recalled:
        self._archive()
        found: Recalled = self._hop(self._recall(session_key, query, limit))
        return found

    def forget(self, session_key: str, ask: ForgetRequest) -> Forgotten:
        self._archive()
        done: Forgotten = self._hop(self._forget(session_key, ask))
        return done

    def reflect(self, session_key: str, query: str, should_stop: Callable[[], bool]) -> str:
        service = self._archive()
        found = self.recall(session_key, query, service.recall_limit)
        try:
            return service.answer(query, found, should_stop)  # the model call: this thread
        except ModelError as exc:
            raise ToolError(f"the model could not reflect: {exc.user_message}") from None

    def _archive(self) -> MemoryService:
        """The archive's service. Without one (no platform enables a `hindsight_*` tool) its
        services answer as if not lent: not available here (`user_of` always is)."""
        if self.service is None:
            raise ToolError(UNAVAILABLE)
        return self.service

    def _hop(self, coro: Any) -> Any:
        try:
            return hop(
                self._loop, coro, self.timeout_s, "the memory archive did not answer in time"
            )
        except StoreError as exc:
            raise ToolError(f"the memory archive is unavailable: {exc}") from None
