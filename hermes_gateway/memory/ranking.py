"""Recall's ranking: reciprocal rank fusion of the keyword, vector and recency rankings, and the
trim to a token budget (the vector ranking itself: `vectors.py`)."""

from __future__ import annotations

from collections.abc import Sequence

RRF_K = 60  # the usual constant: damps the weight of the very first ranks
# recency breaks ties between equally relevant memories; it must not outvote relevance
RECENCY_WEIGHT = 0.3
CHARS_PER_TOKEN = 4  # a rough estimate, enough for a budget


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
