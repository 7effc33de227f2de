"""The shutdown stops the parts in the reverse of their start, after intake: the adapters stop,
then the scheduler, the runs drain and are interrupted, delivery and the pool stop, the control
server and the dashboard, then the bus and the store; a start cut short stops what it began."""

from __future__ import annotations

import socket
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from hermes_gateway.errors import ConfigError
from hermes_gateway.server import Gateway
from tests.fakes.openai import FakeOpenAI
from tests.harness import make_config


def record(
    monkeypatch: pytest.MonkeyPatch, seen: list[str], name: str, owner: Any, method: str
) -> None:
    """``owner.method`` notes ``name`` in ``seen`` when called, then does what it did."""
    real: Callable[..., Any] = getattr(owner, method)

    def noted(*args: Any, **kwargs: Any) -> Any:
        seen.append(name)
        return real(*args, **kwargs)

    monkeypatch.setattr(owner, method, noted)


def watched(gw: Gateway, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    seen: list[str] = []
    assert gw.scheduler is not None and gw.dashboard is not None
    for name, owner, method in (
        ("scheduler", gw.scheduler, "stop"),
        ("drain", gw.runner, "drain"),
        ("interrupt", gw.runner, "interrupt_all"),
        ("delivery", gw.delivery, "close"),
        ("pool", gw.pool, "shutdown"),
        ("control", gw.control, "stop"),
        ("dashboard", gw.dashboard, "stop"),
        ("bus", gw.bus, "aclose"),
        ("store", gw.store, "close"),
        ("models", gw.agent_factory, "close"),
    ):
        record(monkeypatch, seen, name, owner, method)
    return seen


async def test_the_parts_stop_after_intake_in_the_reverse_of_their_start(
    tmp_path: Path, fake_llm: FakeOpenAI, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = make_config(
        tmp_path, fake_llm.base_url, scheduler={"enabled": True}, dashboard={"enabled": True}
    )
    gw = Gateway(config)
    seen = watched(gw, monkeypatch)
    await gw.startup()
    record(monkeypatch, seen, "adapter", gw.adapters["api"], "stop")
    await gw.shutdown()
    assert seen == [
        "adapter",
        "scheduler",
        "drain",
        "interrupt",
        "delivery",
        "pool",
        "control",
        "dashboard",
        "bus",
        "store",
        "models",
    ]


async def test_a_start_cut_short_stops_what_it_began_and_nothing_else(
    tmp_path: Path, fake_llm: FakeOpenAI, monkeypatch: pytest.MonkeyPatch
) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        config = make_config(
            tmp_path,
            fake_llm.base_url,
            scheduler={"enabled": True},
            dashboard={"enabled": True},
            control={"port": port, "max_rss_bytes": 0},
        )
        gw = Gateway(config)
        seen = watched(gw, monkeypatch)
        with pytest.raises(ConfigError):  # the control port is taken: the start fails there
            await gw.startup()
        await gw.shutdown()
    # the runs, the scheduler, delivery and the pool had not started: nothing of theirs ran
    assert seen == ["control", "dashboard", "bus", "store", "models"]
