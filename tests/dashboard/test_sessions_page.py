"""The Sessions page with a thousand sessions tracked: a bounded page of rows, each read once,
and the counts of them all (each viewer reads it every second)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any, cast

from hermes_gateway.core.run import SessionView
from hermes_gateway.dashboard import views


class Runner:
    def __init__(self, sessions: int) -> None:
        self.keys = [f"telegram:dm:{n}" for n in range(sessions)]
        self.described = 0

    def session_keys(self) -> list[str]:
        return list(self.keys)

    def describe(self, key: str) -> SessionView:
        self.described += 1
        return SessionView(None, 0.0, 1)

    def current_messages(self, key: str) -> list[Any]:
        return []

    def counts(self) -> dict[str, int]:
        return {"active": 0, "pending": len(self.keys), "tracked": len(self.keys)}


def test_the_sessions_page_reads_a_bounded_page_and_counts_every_session() -> None:
    runner = Runner(1_000)
    gateway = SimpleNamespace(
        runner=runner, config=SimpleNamespace(runner=SimpleNamespace(busy_policy="queue"))
    )
    page = views.sessions(cast(Any, gateway))
    assert runner.described == views.SESSIONS_SHOWN < 1_000
    assert [row["key"] for row in page["sessions"]] == runner.keys[: views.SESSIONS_SHOWN]
    assert page["shown"] == views.SESSIONS_SHOWN and page["counts"]["tracked"] == 1_000
