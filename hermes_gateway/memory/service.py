"""The archive's operations: retain (optionally extracting facts with one model call), recall
(keyword, vector and recency rankings fused, trimmed to a token budget), reflect (recall, then
one model call answering with citations), and auto-retain of completed turns in the background.

Runs on the event loop; embeddings and model calls go to threads. When no embeddings endpoint
answers, retain still stores the text and recall uses keywords and recency (said in the answer,
logged once per outage); memories stored meanwhile get their vectors at a later recall.
Auto-retained turns go through `background.RetainQueue` (batched, at quiet moments).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import structlog

from agent_core import LLMClient, ModelError
from hermes_gateway.events import MessageEvent
from hermes_gateway.memory.archive import Archive, join_tags
from hermes_gateway.memory.background import RetainQueue, Turn
from hermes_gateway.memory.embeddings import Embedder
from hermes_gateway.memory.ranking import RECENCY_WEIGHT, fuse, within_budget
from tools.host import Memory, Recalled

log = structlog.get_logger("hermes.memory")
DEGRADED = "keyword and recency search only: the embeddings endpoint did not answer"
NOT_CONFIGURED = "keyword and recency search only: no embeddings endpoint is configured"
MEANING_ONLY = (
    "none of these holds the query's words: they are only the nearest by meaning, so check "
    "each and pass the ids of those to forget rather than confirming them all"
)
CANDIDATES = 50  # per ranking, before fusion
BACKFILL = 64  # vectors added to memories stored during an outage, per recall
TURN_CHARS = 4000  # of a turn, when auto-retained
EXTRACT = (
    "Extract the durable facts from the text below: decisions, preferences, names, dates, "
    "commitments. One fact per line, each understandable on its own, no numbering. If there is "
    "nothing worth remembering, answer exactly NONE."
)
REFLECT = (
    "Answer the question using only the memories below, each marked [m<id>]. Cite every "
    "memory you use by its mark, e.g. [m12]. If they do not answer it, say so plainly."
)


@dataclass(frozen=True, slots=True)
class Source:
    """Where a memory comes from."""

    session_key: str = ""
    message_id: str = ""


class MemoryService:
    """One per gateway."""

    def __init__(
        self,
        archive: Archive,
        llm: LLMClient,
        embedder: Embedder | None,
        *,
        extract: bool,
        token_budget: int,
        recall_limit: int,
        busy: Callable[[], bool] = lambda: False,
        outage_pause_s: float = 60.0,
    ) -> None:
        self.archive = archive
        self.llm = llm
        self.embedder = embedder
        self.extract = extract
        self.token_budget = token_budget
        self.recall_limit = recall_limit
        self._down = False  # the embeddings endpoint failed last time (logged once)
        self.outage_pause_s = outage_pause_s
        self._skip_until = 0.0  # monotonic: no embeddings call before (after a failure)
        # banks known to have every vector (since this process started): no backfill query
        self._complete: set[str] = set()
        self.queue = RetainQueue(self._retain_turns, busy)

    @property
    def embeddings_down(self) -> bool:
        """The embeddings endpoint failed at its last call."""
        return self._down

    # -- retain ---------------------------------------------------------------------------

    async def retain(
        self, bank: str, content: str, context: str, tags: tuple[str, ...], source: Source
    ) -> str:
        facts = await self._facts(content) if self.extract else [content]
        if not facts:
            return "Nothing worth remembering was found in that text; nothing stored."
        vectors = await self._embed(facts)
        row = {"bank": bank, "context": context, "tags": join_tags(tags)}
        row.update(session_key=source.session_key, message_id=source.message_id)
        ids = await self.archive.add(self._rows([{**row, "content": f} for f in facts], vectors))
        marks = ", ".join(f"m{i}" for i in ids)
        said = f"Stored {len(ids)} memor{'y' if len(ids) == 1 else 'ies'} ({marks})."
        if vectors:
            return said
        return f"{said} [{self._why_no_vectors()}; it is found by its words for now]"

    def _why_no_vectors(self) -> str:
        return DEGRADED if self.embedder is not None else NOT_CONFIGURED

    async def _retain_turns(self, turns: list[Turn]) -> None:
        """Auto-retain's batch: one embeddings request, one transaction."""
        rows = []
        for turn in turns:
            facts = await self._facts(turn.content) if self.extract else [turn.content]
            base = {"bank": turn.bank, "context": "conversation turn", "tags": "turn"}
            base.update(session_key=turn.session_key, message_id=turn.message_id)
            rows += [{**base, "content": fact} for fact in facts]
        if rows:
            await self.archive.add(
                self._rows(rows, await self._embed([r["content"] for r in rows]))
            )

    def _rows(
        self, rows: list[dict[str, Any]], vectors: list[bytes] | None
    ) -> list[dict[str, Any]]:
        now = time.time()
        model = self.embedder.model if vectors and self.embedder else ""
        if vectors is None:
            self._complete.difference_update(row["bank"] for row in rows)
        for i, row in enumerate(rows):
            row.update(created_at=now, embedding=vectors[i] if vectors else None, model=model)
        return rows

    async def _facts(self, content: str) -> list[str]:
        messages = [{"role": "system", "content": EXTRACT}, {"role": "user", "content": content}]
        try:
            done = await asyncio.to_thread(self.llm.complete, messages)
        except ModelError as exc:
            log.warning("memory.extract_failed", error=str(exc))
            return [content]  # stored as given rather than lost
        lines = [ln.strip(" -*\t") for ln in done.content.splitlines()]
        facts = [ln for ln in lines if ln and ln.upper() != "NONE"]
        return facts[:32]

    async def _embed(self, texts: list[str]) -> list[bytes] | None:
        """The texts' vectors, or None while no embeddings endpoint answers."""
        if self.embedder is None or time.monotonic() < self._skip_until:
            return None
        try:
            vectors = await asyncio.to_thread(self.embedder.embed, texts)
        except ModelError as exc:
            if not self._down:
                log.warning("memory.embeddings_unavailable", error=str(exc), fallback="keywords")
            self._down = True
            self._skip_until = time.monotonic() + self.outage_pause_s
            return None
        if self._down:
            log.info("memory.embeddings_back")
            self._down = False
        return vectors

    # -- recall and reflect ---------------------------------------------------------------

    async def recall(self, bank: str, query: str, limit: int) -> Recalled:
        (keyword, vector, recent), note = await self._rankings(bank, query)
        # recency orders what matched; alone it would return anything at all
        relevant = set(keyword) | set(vector)
        fused = fuse([keyword, vector, recent], (1.0, 1.0, RECENCY_WEIGHT))
        order = [mid for mid in fused if mid in relevant][:limit]
        found = await self.archive.fetch(bank, order)
        keep = within_budget([m.content + m.context for m in found], self.token_budget)
        return Recalled(tuple(found[:keep]), note)

    async def matches(self, bank: str, query: str, limit: int) -> Recalled:
        """What a forget by ``query`` offers to delete: the memories holding its words, or
        when none does, the nearest by meaning (said in the note: the vector ranking always
        has nearest ones, relevant or not, so they are to be checked one by one)."""
        (keyword, vector, _), note = await self._rankings(bank, query)
        if not keyword and vector:
            note = MEANING_ONLY
        found = await self.archive.fetch(bank, (keyword or vector)[:limit])
        return Recalled(tuple(found), note)

    async def _rankings(
        self, bank: str, query: str
    ) -> tuple[tuple[list[int], list[int], list[int]], str]:
        """The archive's three rankings for ``query``, and the note of a degraded search."""
        qvec = await self._embed([query])
        model = self.embedder.model if self.embedder is not None else ""
        if qvec is not None:
            await self._backfill(bank)
        vec = qvec[0] if qvec is not None else None
        ranked = await self.archive.rankings(bank, query, vec, model, CANDIDATES)
        return ranked, self._why_no_vectors() if qvec is None else ""

    async def _backfill(self, bank: str) -> None:
        if self.embedder is None or bank in self._complete:
            return
        waiting = await self.archive.unembedded(bank, self.embedder.model, BACKFILL)
        vectors = await self._embed([body for _, body in waiting]) if waiting else []
        if vectors is None:
            return
        if waiting:
            pairs = [(mid, vec) for (mid, _), vec in zip(waiting, vectors, strict=True)]
            await self.archive.set_embeddings(bank, pairs, self.embedder.model)
        if len(waiting) < BACKFILL:
            self._complete.add(bank)

    def answer(self, query: str, found: Recalled, should_stop: Callable[[], bool]) -> str:
        """Reflect's model call (blocking: a worker thread), over what recall found."""
        if not found.memories:
            return f"Nothing in the archive bears on {query!r}." + _note(found)
        listed = "\n".join(_cite(m) for m in found.memories)
        messages = [
            {"role": "system", "content": REFLECT},
            {"role": "user", "content": f"Memories:\n{listed}\n\nQuestion: {query}"},
        ]
        done = self.llm.complete(messages, should_stop=should_stop)
        if done.interrupted:
            return "Interrupted."
        return done.content.strip() + _note(found)

    # -- auto-retain ----------------------------------------------------------------------

    def turn_done(self, event: MessageEvent, bank: str, text: str, reply: str) -> None:
        """Queue a completed turn for retaining; never waits, never delays a reply."""
        body = f"User: {text}\nAssistant: {reply}"[:TURN_CHARS]
        self.queue.put(Turn(bank, body, event.session_key, event.message_id))

    async def close(self) -> None:
        """At shutdown, before the store closes: what auto-retain holds gets 2 s."""
        await self.queue.close(flush_s=2.0)
        if self.embedder is not None:
            await asyncio.to_thread(self.embedder.close)


def _cite(m: Memory) -> str:
    when = time.strftime("%Y-%m-%d", time.gmtime(m.when))
    extra = f" (context: {m.context})" if m.context else ""
    return f"[m{m.id}] {when}: {m.content}{extra}"


def _note(found: Recalled) -> str:
    return f"\n[{found.note}]" if found.note else ""
