"""The session table's counts (`/status`, the metrics' gauges, the dashboard) are kept as the
table changes: reading them costs the same with ten sessions as with five thousand, and they
always equal a count made by walking every session."""

from __future__ import annotations

import random
import sys
from collections.abc import Callable
from types import FrameType
from typing import Any

from hermes_gateway.core.sessions import Pending, SessionTable
from tests.harness import dm


def _calls(read: Callable[[], Any]) -> int:
    """How many Python-level calls (generator steps included) ``read`` makes."""
    count = 0

    def profile(_frame: FrameType, event: str, _arg: Any) -> None:
        nonlocal count
        if event == "call":
            count += 1

    sys.setprofile(profile)
    try:
        read()
    finally:
        sys.setprofile(None)
    return count


def _table(sessions: int) -> SessionTable[object]:
    table: SessionTable[object] = SessionTable()
    for n in range(sessions):
        key = f"telegram:dm:{n}"
        table.acquire(key, object())
        table.push(key, Pending(dm(str(n), "hi", chat=str(n)), n))
    return table


def test_reading_the_counts_costs_the_same_with_ten_or_five_thousand_sessions() -> None:
    small, large = _table(10), _table(5_000)
    assert large.stats() == {"active": 5_000, "pending": 5_000, "tracked": 5_000}
    assert _calls(large.stats) == _calls(small.stats)
    _each_change_keeps_the_counts()


def _walked(table: SessionTable[object]) -> dict[str, int]:
    keys = table.keys()
    return {
        "active": sum(1 for k in keys if table.active(k) is not None),
        "pending": sum(table.pending_count(k) for k in keys),
        "tracked": len(keys),
    }


def _each_change_keeps_the_counts() -> None:
    """Through 5,000 random changes, the kept counts equal a walk over every session."""
    rng = random.Random(7)
    table: SessionTable[object] = SessionTable()
    runs: dict[str, object] = {}
    for step in range(5_000):
        key = f"k{rng.randrange(30)}"
        item = Pending(dm(str(step), "x"), step, separate=rng.random() < 0.2)
        what = rng.randrange(9)
        if what == 0:
            run = object()
            if table.acquire(key, run):
                runs[key] = run
        elif what == 1 and key in runs:
            table.release(key, runs.pop(key))
        elif what == 2 and key in runs:
            new = object()
            table.hand_over(key, runs[key], new)
            runs[key] = new
        elif what == 3:
            table.push(key, item)
        elif what == 4:
            table.push_front(key, [item, item])
        elif what == 5:
            table.pop_one(key)
        elif what == 6:
            table.take_turn(key, merge=rng.random() < 0.5)
        elif what == 7:
            table.pop_all(key)
        else:
            table.replace_pending(key, item)
        assert table.stats() == _walked(table), step
