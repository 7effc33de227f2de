"""The control server's sampled log of refused requests: the first of a kind is a line, the
rest are counts in one summary line per interval, and a flood from many addresses stays a
handful of lines."""

from __future__ import annotations

from collections.abc import MutableMapping
from typing import Any

from structlog.testing import capture_logs

from hermes_gateway.control.rejections import FIRST_LINES_PER_INTERVAL, Rejections


def refused(rejections: Rejections, n: int, source: str = "10.0.0.1", code: str = "x") -> None:
    for _ in range(n):
        rejections.note(code, 401, source, "/slack/events", "bad signature")


def events(logs: list[MutableMapping[str, Any]], name: str) -> list[MutableMapping[str, Any]]:
    return [e for e in logs if e["event"] == name]


def test_the_first_of_a_kind_is_a_line_and_the_rest_a_count() -> None:
    clock = [0.0]
    rejections = Rejections(10, clock=lambda: clock[0])
    with capture_logs() as logs:
        refused(rejections, 1000)
        refused(rejections, 5, code="y")
        clock[0] = 10.0
        rejections.flush()
        refused(rejections, 7)  # known: counted from the start
        rejections.flush()
        rejections.flush()  # nothing counted: no line
    first = events(logs, "control.rejected")
    assert [(e["code"], e["source"], e["path"]) for e in first] == [
        ("x", "10.0.0.1", "/slack/events"),
        ("y", "10.0.0.1", "/slack/events"),
    ]
    summaries = events(logs, "control.rejected_summary")
    assert [s["total"] for s in summaries] == [1003, 7]
    assert summaries[0]["kinds"] == [
        {"code": "x", "source": "10.0.0.1", "path": "/slack/events", "count": 999},
        {"code": "y", "source": "10.0.0.1", "path": "/slack/events", "count": 4},
    ]
    assert summaries[0]["seconds"] == 10.0


def test_a_flood_from_many_addresses_is_a_few_lines() -> None:
    rejections = Rejections(10)
    with capture_logs() as logs:
        for n in range(10_000):
            refused(rejections, 3, source=f"10.{n // 250}.{n % 250}.1")
        rejections.flush()
    assert len(events(logs, "control.rejected")) == FIRST_LINES_PER_INTERVAL
    [summary] = events(logs, "control.rejected_summary")
    assert summary["total"] == 30_000 - FIRST_LINES_PER_INTERVAL
    assert len(summary["kinds"]) == 20
    assert summary["other"] + sum(k["count"] for k in summary["kinds"]) == summary["total"]
