"""Hypothesis strategies for hostile payloads: arbitrary JSON, and valid payloads mutated
(keys dropped, values swapped for junk of another type, strings truncated) at every depth."""

from __future__ import annotations

import os
import random
from typing import Any

from hypothesis import strategies as st


def examples(ci: int) -> int:
    """Hypothesis examples per test: ``ci`` in CI; ``HERMES_FUZZ_EXAMPLES`` for a long run
    (the report runner uses thousands)."""
    return int(os.environ.get("HERMES_FUZZ_EXAMPLES") or ci)


NASTY_TEXT = st.text(
    alphabet=st.characters(blacklist_categories=("Cs",)) | st.sampled_from("@/<>&`*_\n\u200d😀"),
    max_size=40,
)
SCALARS = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**64)
    | st.floats(allow_nan=False, allow_infinity=False)
    | NASTY_TEXT
)
JSON = st.recursive(
    SCALARS,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(NASTY_TEXT, inner, max_size=4),
    max_leaves=12,
)


@st.composite
def mutated(draw: st.DrawFn, value: Any, depth: int = 0) -> Any:
    """``value`` with some of its parts dropped, replaced or truncated."""
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        for key, item in value.items():
            choice = draw(st.sampled_from(["keep", "keep", "keep", "mutate", "drop", "junk"]))
            if choice == "drop":
                continue
            if choice == "junk":
                out[key] = draw(JSON)
            elif choice == "mutate" and depth < 4:
                out[key] = draw(mutated(item, depth + 1))
            else:
                out[key] = item
        if draw(st.integers(0, 9)) == 0:
            out[draw(NASTY_TEXT)] = draw(JSON)
        return out
    if isinstance(value, list):
        items = [draw(mutated(v, depth + 1)) for v in value]
        return items[: draw(st.integers(0, len(items)))] if items else items
    if isinstance(value, str):
        cut = draw(st.integers(0, len(value)))
        return value[:cut] + draw(st.sampled_from(["", "", "😀", "\u200d", "@", "<@1000>"]))
    if isinstance(value, bool) or value is None:
        return draw(st.sampled_from([value, not value, None, 0, "true"]))
    if isinstance(value, int):
        return draw(st.sampled_from([value, -value, 0, -1, 2**64, value + 1, str(value)]))
    return draw(JSON)


def mutate(value: Any, rng: random.Random, depth: int = 0) -> Any:
    """`mutated` for a seeded `random.Random`, where a test cannot be driven by hypothesis
    (one running gateway takes a whole batch of payloads)."""
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        for key, item in value.items():
            roll = rng.random()
            if roll < 0.1:
                continue
            if roll < 0.18:
                out[key] = rng.choice(JUNK)
            elif roll < 0.35 and depth < 4:
                out[key] = mutate(item, rng, depth + 1)
            else:
                out[key] = item
        return out
    if isinstance(value, list):
        return [mutate(v, rng, depth + 1) for v in value][: rng.randint(0, len(value))]
    if isinstance(value, str):
        return value[: rng.randint(0, len(value))] + rng.choice(["", "😀", "\u200d", "<@1000>"])
    if isinstance(value, bool) or value is None:
        return rng.choice([value, not value, None, 0, "true"])
    if isinstance(value, int):
        return rng.choice([value, -value, 0, -1, 2**64, str(value)])
    return rng.choice(JUNK)


JUNK: list[Any] = [None, True, 0, -1, 2**64, 1.5, "", "x", "😀", [], {}, [None], {"": None}]
