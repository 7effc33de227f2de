"""Recall's ranking: the brute-force vector scan, reciprocal rank fusion of the keyword, vector
and recency rankings, and the trim to a token budget. Pure functions; the vector scan is CPU
work, so the archive runs it with `asyncio.to_thread`."""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Sequence
from operator import mul

from hermes_gateway.memory.embeddings import unpack

RRF_K = 60  # the usual constant: damps the weight of the very first ranks
# recency breaks ties between equally relevant memories; it must not outvote relevance
RECENCY_WEIGHT = 0.3
CHARS_PER_TOKEN = 4  # a rough estimate, enough for a budget


def nearest(query: bytes, rows: Iterable[tuple[int, bytes]], limit: int) -> list[int]:
    """The ids of the ``limit`` rows whose unit vector is closest to ``query`` (cosine), best
    first; rows of another dimension (another embedding model) are skipped."""
    q = unpack(query)
    dims = len(q)
    scored = (
        (sum(map(mul, q, vec)), mid)
        for mid, blob in rows
        if len(blob) == dims * 4 and len(vec := unpack(blob)) == dims
    )
    return [mid for _, mid in heapq.nlargest(limit, scored)]


def fuse(
    rankings: Sequence[Sequence[int]], weights: Sequence[float] = (), k: int = RRF_K
) -> list[int]:
    """Weighted reciprocal rank fusion: each id scores the sum of weight/(k + rank) over the
    rankings that list it (weight 1 unless given); best first, ties to the newer id."""
    scores: dict[int, float] = {}
    for n, ranking in enumerate(rankings):
        weight = weights[n] if n < len(weights) else 1.0
        for rank, mid in enumerate(ranking, 1):
            scores[mid] = scores.get(mid, 0.0) + weight / (k + rank)
    return sorted(scores, key=lambda mid: (-scores[mid], -mid))


def within_budget(texts: Sequence[str], budget_tokens: int) -> int:
    """How many of ``texts``, in order, fit in about ``budget_tokens`` (at least one)."""
    used = 0
    for n, body in enumerate(texts):
        used += len(body) // CHARS_PER_TOKEN + 8  # the line's source and date
        if used > budget_tokens and n > 0:
            return n
    return len(texts)
