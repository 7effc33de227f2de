"""Shared pytest setup: every async test runs on uvloop, like the daemon."""

from __future__ import annotations

import gc
from collections import Counter
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
import uvloop

from hermes_gateway.store.store import Store
from tests.fakes.openai import FakeOpenAI

if TYPE_CHECKING:
    from tests.fakes.otlp import Receiver


def pytest_asyncio_loop_factories(
    config: pytest.Config, item: pytest.Item
) -> dict[str, Callable[[], Any]]:
    return {"uvloop": uvloop.new_event_loop}


@pytest.fixture(scope="session")
def openai_server() -> Iterator[FakeOpenAI]:
    with FakeOpenAI(api_key="sk-fake") as server:
        yield server


@pytest.fixture
def fake_llm(openai_server: FakeOpenAI) -> Iterator[FakeOpenAI]:
    """The shared fake LLM, with its script, counters and delays reset for this test."""
    openai_server.reset()
    openai_server.responder = None
    openai_server.delay = 0.0
    yield openai_server
    openai_server.reset()
    openai_server.responder = None
    openai_server.delay = 0.0


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    """A test OTLP/HTTP collector on 127.0.0.1, for the traces tests."""
    from tests.fakes.otlp import Receiver  # OpenTelemetry's protobuf: only where it is used

    server = Receiver()
    server.start()
    yield server
    server.stop()


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[Store]:
    """An open SQLite store in the test's directory (``state.db``)."""
    s = Store(f"sqlite+aiosqlite:///{tmp_path}/state.db")
    await s.open()
    yield s
    await s.close()


@pytest.fixture(autouse=True)
def _unfreeze_heap() -> Iterator[None]:
    """A gateway started in-process freezes the heap after warm-up (as the daemon should);
    the test process lives on, so give the collector its objects back after each test."""
    yield
    gc.unfreeze()


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    """One line at the end: how many tests were skipped and why, most common reason first
    (e.g. the PostgreSQL tests, without HERMES_TEST_POSTGRES or a server scripts/test started)."""
    reasons: Counter[str] = Counter()
    for report in terminalreporter.stats.get("skipped", []):
        longrepr = report.longrepr
        why = str(longrepr[2]) if isinstance(longrepr, tuple | list) else str(longrepr)
        reasons[why.removeprefix("Skipped: ")] += 1
    if reasons:
        parts = "; ".join(f"{n} {why}" for why, n in reasons.most_common())
        terminalreporter.write_line(f"skipped {reasons.total()}: {parts}")
