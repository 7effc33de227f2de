"""Deterministic embeddings for the fake OpenAI server: words of one topic share a direction, so
"kitten" and "feline pet" are near and "backup schedule" is far, with no word in common needed.

Each known word adds 1 on its topic's axis; any other word adds a little on one of a few hashed
axes (so unrelated texts are not all identical). The model name does not change the vectors.
"""

from __future__ import annotations

import re
import zlib

TOPICS: dict[str, tuple[str, ...]] = {
    "pets": (
        "cat",
        "cats",
        "kitten",
        "kittens",
        "feline",
        "tabby",
        "dog",
        "dogs",
        "puppy",
        "pet",
        "pets",
        "whiskers",
        "mittens",
    ),
    "backup": ("backup", "backups", "snapshot", "snapshots", "restore", "archive", "nightly"),
    "food": (
        "pizza",
        "pasta",
        "food",
        "meal",
        "dinner",
        "lunch",
        "cuisine",
        "vegetarian",
        "eat",
        "diet",
        "allergic",
        "peanuts",
        "gluten",
    ),
    "travel": (
        "flight",
        "trip",
        "travel",
        "vacation",
        "holiday",
        "journey",
        "lisbon",
        "paris",
        "airport",
        "hotel",
    ),
    "database": ("postgres", "postgresql", "database", "sql", "sqlite", "db", "schema"),
    "secret": ("pin", "password", "passcode", "secret", "code", "combination"),
}
_AXIS = {word: n for n, words in enumerate(TOPICS.values()) for word in words}
HASHED = 8
DIMENSIONS = len(TOPICS) + HASHED
_WORD = re.compile(r"\w+")


def embed(text: str) -> list[float]:
    """The (not normalized) vector of ``text``."""
    vec = [0.0] * DIMENSIONS
    for word in _WORD.findall(text.lower()):
        axis = _AXIS.get(word)
        if axis is not None:
            vec[axis] += 1.0
        else:
            vec[len(TOPICS) + zlib.crc32(word.encode()) % HASHED] += 0.1
    if not any(vec):
        vec[-1] = 1.0
    return vec
