"""The brute-force vector search: a bank's vectors as one float32 matrix, kept in a bounded
cache and grown with the rows added since, so a recall is one matrix product (numpy), in a
thread. Vectors are unit length, so the product is the cosine."""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

Matrix = npt.NDArray[np.float32]
CACHE_BYTES = 256 * 1024 * 1024  # all banks' matrices together; a bigger bank is not kept


@dataclass(slots=True)
class BankVectors:
    ids: npt.NDArray[np.int64]
    array: Matrix  # one row per id
    last_id: int  # the newest row included: later ones are appended

    @property
    def nbytes(self) -> int:
        return int(self.array.nbytes + self.ids.nbytes)


def build(rows: Iterable[tuple[int, bytes]], dims: int) -> tuple[npt.NDArray[np.int64], Matrix]:
    """Rows of ``dims`` float32 values as (ids, matrix); rows of another size are skipped
    (vectors of another embedding model)."""
    size = dims * 4
    kept = [(mid, blob) for mid, blob in rows if len(blob) == size]
    ids = np.fromiter((mid for mid, _ in kept), dtype=np.int64, count=len(kept))
    flat = np.frombuffer(b"".join(blob for _, blob in kept), dtype=np.float32)
    return ids, flat.reshape(len(kept), dims)


def best(ids: npt.NDArray[np.int64], matrix: Matrix, query: bytes, limit: int) -> list[int]:
    """The ids of the ``limit`` rows nearest to ``query``, best first."""
    if not len(ids):
        return []
    scores = matrix @ np.frombuffer(query, dtype=np.float32)
    n = len(scores)
    top = np.argpartition(-scores, limit)[:limit] if n > limit else np.arange(n)
    order = top[np.argsort(-scores[top], kind="stable")]
    return [int(i) for i in ids[order]]


class VectorCache:
    """(bank, model) -> that bank's matrix, least recently used dropped past ``max_bytes``.
    Thread-safe: searches run on worker threads."""

    def __init__(self, max_bytes: int = CACHE_BYTES) -> None:
        self.max_bytes = max_bytes
        self._items: OrderedDict[tuple[str, str], BankVectors] = OrderedDict()
        self._generation: dict[str, int] = {}  # bank -> times forgotten
        self._lock = threading.Lock()

    def get(self, key: tuple[str, str]) -> tuple[BankVectors | None, int]:
        """The cached vectors (or None) and the bank's generation, to hand back to `put`."""
        with self._lock:
            found = self._items.get(key)
            if found is not None:
                self._items.move_to_end(key)
            return found, self._generation.get(key[0], 0)

    def put(self, key: tuple[str, str], value: BankVectors, generation: int) -> None:
        """Keep ``value`` unless the bank was forgotten since `get` (it may be stale)."""
        with self._lock:
            self._items.pop(key, None)
            if value.nbytes > self.max_bytes or generation != self._generation.get(key[0], 0):
                return
            self._items[key] = value
            while sum(v.nbytes for v in self._items.values()) > self.max_bytes:
                self._items.popitem(last=False)

    def forget(self, bank: str) -> None:
        """After vectors of older rows changed (a backfill): rebuilt at the next search."""
        with self._lock:
            self._generation[bank] = self._generation.get(bank, 0) + 1
            for key in [k for k in self._items if k[0] == bank]:
                del self._items[key]


def grown(
    old: BankVectors | None, rows: list[tuple[int, bytes]], dims: int, last_id: int
) -> BankVectors:
    """``old`` with ``rows`` (newer than its last id) appended, or a new one from them;
    ``last_id``: the bank's newest row, vector or not, so it is not read again."""
    ids, matrix = build(rows, dims)
    if old is None:
        return BankVectors(ids, matrix, last_id)
    return BankVectors(np.concatenate([old.ids, ids]), np.concatenate([old.array, matrix]), last_id)
