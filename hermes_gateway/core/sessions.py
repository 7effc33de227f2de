"""Per-session concurrency state: the active-run guard and the pending messages.

All of it sits behind `SessionTable`, the one small interface a multi-process deployment would
back with Redis (leases for guards, lists for pending). This in-process version is mutated
only on the event-loop thread, so check-and-set needs no lock.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Generic, TypeVar

from hermes_gateway.events import MessageEvent

if TYPE_CHECKING:
    from hermes_gateway.core.job_turns import JobTicket

R = TypeVar("R")


@dataclass(frozen=True, slots=True)
class Pending:
    """An accepted message waiting for its turn; `inbox_id` is None for messages not stored."""

    event: MessageEvent
    inbox_id: int | None
    separate: bool = False  # a `/queue` turn: never merged with its neighbours
    job: JobTicket | None = None  # a scheduled job's turn (no inbox entry: the run ledger's)


@dataclass(slots=True)
class _Slot(Generic[R]):
    active: R | None = None
    pending: deque[Pending] = field(default_factory=deque)


class SessionTable(Generic[R]):
    """Active guard + pending messages per session_key; idle sessions take no memory. The
    counts (`stats`) are kept as the table changes: `/status`, the metrics and the dashboard
    read them often, and a walk over a thousand sessions each time is theirs to pay."""

    def __init__(self) -> None:
        self._slots: dict[str, _Slot[R]] = {}
        self._active = 0  # slots with an active run
        self._pending = 0  # messages waiting, over every slot

    def active(self, key: str) -> R | None:
        slot = self._slots.get(key)
        return slot.active if slot else None

    def acquire(self, key: str, run: R) -> bool:
        """Take the guard; False if the session already has an active run."""
        slot = self._slots.setdefault(key, _Slot())
        if slot.active is not None:
            return False
        slot.active = run
        self._active += 1
        return True

    def hand_over(self, key: str, old: R, new: R) -> None:
        """Pass the guard straight to the next run, so no message can slip in between."""
        slot = self._slots[key]
        if slot.active is old:
            slot.active = new

    def release(self, key: str, run: R) -> None:
        """Drop the guard if ``run`` still holds it; forget the slot once it is idle."""
        slot = self._slots.get(key)
        if slot is None or slot.active is not run:
            return
        slot.active = None
        self._active -= 1
        if not slot.pending:
            del self._slots[key]

    def push(self, key: str, item: Pending) -> int:
        slot = self._slots.setdefault(key, _Slot())
        slot.pending.append(item)
        self._pending += 1
        return len(slot.pending)

    def push_front(self, key: str, items: list[Pending]) -> None:
        slot = self._slots.setdefault(key, _Slot())
        slot.pending.extendleft(reversed(items))
        self._pending += len(items)

    def pending_count(self, key: str) -> int:
        slot = self._slots.get(key)
        return len(slot.pending) if slot else 0

    def pending(self, key: str) -> list[Pending]:
        slot = self._slots.get(key)
        return list(slot.pending) if slot else []

    def pop_one(self, key: str) -> Pending | None:
        slot = self._slots.get(key)
        if not slot or not slot.pending:
            return None
        self._pending -= 1
        return slot.pending.popleft()

    def take_turn(self, key: str, *, merge: bool) -> list[Pending]:
        """What the next run answers: the first pending message, with (``merge``) those after
        it up to a separate one (`/queue`), which waits for a turn of its own."""
        first = self.pop_one(key)
        if first is None:
            return []
        if first.separate or not merge:
            return [first]
        items = [first]
        while (nxt := self.pop_one(key)) is not None:
            if nxt.separate:
                self.push_front(key, [nxt])
                break
            items.append(nxt)
        return items

    def pop_all(self, key: str) -> list[Pending]:
        slot = self._slots.get(key)
        if not slot:
            return []
        items = list(slot.pending)
        slot.pending.clear()
        self._pending -= len(items)
        return items

    def replace_pending(self, key: str, item: Pending) -> list[Pending]:
        """Keep only ``item`` pending (the `latest` policy); return what it superseded."""
        old = self.pop_all(key)
        self.push(key, item)
        return old

    def __len__(self) -> int:
        return len(self._slots)

    def keys(self) -> list[str]:
        """The sessions with a run or a message waiting."""
        return list(self._slots)

    def active_runs(self) -> Iterator[R]:
        return (slot.active for slot in self._slots.values() if slot.active is not None)

    def stats(self) -> dict[str, int]:
        return {"active": self._active, "pending": self._pending, "tracked": len(self._slots)}
