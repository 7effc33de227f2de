"""The event bus (ordering, isolation, timeouts, threads, drain) and user hooks loaded onto it."""

from __future__ import annotations

import asyncio
import re
import sys
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import structlog
from structlog.testing import capture_logs

import hermes_gateway.core.bus as bus_module
import hermes_gateway.core.hooks as hooks_module
from hermes_gateway.core.bus import LIFECYCLE_EVENTS, EventBus, LifecycleEvent
from hermes_gateway.core.hooks import collect_hooks, install_hooks
from hermes_gateway.errors import ConfigError


@pytest.fixture(autouse=True)
def fresh_loggers(monkeypatch: pytest.MonkeyPatch) -> None:
    # a logger cached under another test's structlog config would bypass capture_logs
    monkeypatch.setattr(bus_module, "log", structlog.get_logger("hermes.bus"))
    monkeypatch.setattr(hooks_module, "log", structlog.get_logger("hermes.hooks"))


@pytest.fixture
async def bus() -> AsyncIterator[EventBus]:
    bus = EventBus(timeout=1.0)
    yield bus
    await bus.aclose(timeout=0.5)
    # a subscriber worker must never die: a failing handler is logged, not fatal
    for sub in bus._subs:
        if sub.task is not None and sub.task.done() and not sub.task.cancelled():
            assert sub.task.exception() is None


async def wait_until(predicate: Callable[[], bool], timeout: float = 2.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError("condition not met in time")
        await asyncio.sleep(0.005)


class TestDelivery:
    async def test_each_subscriber_sees_publish_order(self, bus: EventBus) -> None:
        seen_async: list[int] = []
        seen_sync: list[int] = []

        async def async_sub(ev: LifecycleEvent) -> None:
            if ev.data["n"] % 7 == 0:
                await asyncio.sleep(0)  # yield mid-stream: order must still hold
            seen_async.append(ev.data["n"])

        def sync_sub(ev: LifecycleEvent) -> None:
            seen_sync.append(ev.data["n"])

        bus.subscribe(async_sub)
        bus.subscribe(sync_sub, ["tool_event"])
        for n in range(300):
            bus.emit("tool_event" if n % 2 else "agent_run", n=n)
        await bus.aclose(timeout=5)
        assert seen_async == list(range(300))
        assert seen_sync == list(range(1, 300, 2))

    async def test_emit_fills_in_the_event(self, bus: EventBus) -> None:
        got: list[LifecycleEvent] = []

        async def sub(ev: LifecycleEvent) -> None:
            got.append(ev)

        bus.subscribe(sub, ["error"])
        bus.emit("error", session_key="telegram:dm:1", run_id="r1", reason="boom")
        await wait_until(lambda: len(got) == 1)
        ev = got[0]
        assert (ev.name, ev.session_key, ev.run_id, dict(ev.data)) == (
            "error",
            "telegram:dm:1",
            "r1",
            {"reason": "boom"},
        )

    async def test_failing_subscriber_does_not_affect_others(self, bus: EventBus) -> None:
        good: list[int] = []

        async def bad(ev: LifecycleEvent) -> None:
            raise RuntimeError("hook bug")

        async def fine(ev: LifecycleEvent) -> None:
            good.append(ev.data["n"])

        bus.subscribe(bad, name="bad")
        bus.subscribe(fine, name="fine")
        for n in range(10):
            bus.emit("message_received", n=n)
        await bus.aclose(timeout=2)
        assert good == list(range(10))

    async def test_failing_subscriber_is_logged_and_keeps_receiving(self, bus: EventBus) -> None:
        calls: list[int] = []

        async def bad(ev: LifecycleEvent) -> None:
            calls.append(ev.data["n"])
            if ev.data["n"] % 2 == 0:
                raise RuntimeError("hook bug")

        bus.subscribe(bad, name="bad")
        with capture_logs() as logs:
            for n in range(10):
                bus.emit("message_received", n=n)
            await bus.aclose(timeout=2)
        assert calls == list(range(10))
        failed = [e for e in logs if e["event"] == "bus.subscriber_failed"]
        assert len(failed) == 5
        assert failed[0]["subscriber"] == "bad"
        assert failed[0]["log_level"] == "error"
        assert failed[0]["exc_info"] is True

    async def test_slow_subscriber_delays_neither_publish_nor_others(self, bus: EventBus) -> None:
        slow_calls: list[int] = []
        fast: list[int] = []

        async def slow(ev: LifecycleEvent) -> None:
            slow_calls.append(ev.data["n"])
            await asyncio.sleep(5)

        async def quick(ev: LifecycleEvent) -> None:
            fast.append(ev.data["n"])

        bus.subscribe(slow, name="slow", timeout=10)
        bus.subscribe(quick, name="quick")
        for n in range(100):
            bus.emit("processing_start", n=n)
        # publish never awaits: no subscriber has run yet, the caller went straight on
        assert (slow_calls, fast) == ([], [])
        await wait_until(lambda: len(fast) == 100, timeout=5)
        assert fast == list(range(100))
        assert slow_calls == [0]  # still asleep on the first event: it held nobody up
        slow_task = next(s.task for s in bus._subs if s.name == "slow")
        await bus.aclose(timeout=0.1)  # 99 events still queued behind the sleeper
        assert slow_task is not None and slow_task.cancelled()

    async def test_slow_subscriber_is_cut_off_and_logged(self, bus: EventBus) -> None:
        slow_calls: list[int] = []

        async def slow(ev: LifecycleEvent) -> None:
            slow_calls.append(ev.data["n"])
            await asyncio.sleep(5)

        bus.subscribe(slow, name="slow", timeout=0.05)
        with capture_logs() as logs:
            for n in range(3):
                bus.emit("processing_start", n=n)
            await bus.aclose(timeout=0.5)
        assert slow_calls == [0, 1, 2]  # each one cut off after 0.05 s, then the next
        timeouts = [e for e in logs if e["event"] == "bus.subscriber_timeout"]
        assert [e["subscriber"] for e in timeouts] == ["slow"] * 3
        assert timeouts[0]["timeout_s"] == 0.05

    async def test_sync_subscriber_runs_off_the_loop_thread(self, bus: EventBus) -> None:
        threads: list[tuple[int, str]] = []

        def sync_sub(ev: LifecycleEvent) -> None:
            threads.append((threading.get_ident(), threading.current_thread().name))

        bus.subscribe(sync_sub)
        bus.emit("gateway_startup")
        bus.emit("gateway_shutdown")
        await wait_until(lambda: len(threads) == 2)
        loop_thread = threading.get_ident()
        assert all(ident != loop_thread for ident, _ in threads)
        assert all(name.startswith("hermes-hook") for _, name in threads)

    async def test_emit_without_subscribers_builds_nothing(
        self, bus: EventBus, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        built: list[str] = []

        def counting_event(name: str, *args: Any, **kwargs: Any) -> LifecycleEvent:
            built.append(name)
            return LifecycleEvent(name, *args, **kwargs)

        monkeypatch.setattr(bus_module, "LifecycleEvent", counting_event)

        async def sub(ev: LifecycleEvent) -> None:
            pass

        bus.subscribe(sub, ["error"])
        assert not bus.has_subscribers("tool_event")
        assert bus.has_subscribers("error")
        for _ in range(100):
            bus.emit("tool_event", kind="start")
        assert built == []
        bus.emit("error")
        assert built == ["error"]

    async def test_unknown_event_name_rejected_at_subscribe(self, bus: EventBus) -> None:
        async def sub(ev: LifecycleEvent) -> None:
            pass

        with pytest.raises(ValueError, match=r"unknown lifecycle events: \['bogus'\]"):
            bus.subscribe(sub, ["message_received", "bogus"])
        assert not bus.has_subscribers("message_received")

    async def test_unknown_event_name_rejected_at_emit(self, bus: EventBus) -> None:
        got: list[str] = []

        async def sub(ev: LifecycleEvent) -> None:
            got.append(ev.name)

        # no subscriber at all: the typo must still fail, not vanish on the fast path
        with pytest.raises(ValueError, match=r"unknown lifecycle event: 'message_recieved'"):
            bus.emit("message_recieved")
        bus.subscribe(sub)
        with pytest.raises(ValueError, match="unknown lifecycle event"):
            bus.emit("response_send", run_id="r1")
        with pytest.raises(ValueError, match="unknown lifecycle event"):
            bus.publish(LifecycleEvent("Error"))
        await bus.aclose(timeout=2)
        assert got == []
        with pytest.raises(ValueError, match="unknown lifecycle event"):
            bus.emit("bogus")  # closed or not, a typo is a programming error

    def test_every_emit_in_the_product_names_a_lifecycle_event(self) -> None:
        root = Path(__file__).resolve().parents[3]
        pattern = re.compile(r"""\.emit\(\s*["']([^"']+)["']""")
        names: set[str] = set()
        for package in ("hermes_gateway", "adapters", "agent_core", "tools"):
            for source in (root / package).rglob("*.py"):
                names.update(pattern.findall(source.read_text()))
        assert names, "the scan found no emit call: the pattern is stale"
        assert names <= set(LIFECYCLE_EVENTS), sorted(names - set(LIFECYCLE_EVENTS))

    async def test_aclose_drains_queued_events(self, bus: EventBus) -> None:
        got: list[int] = []

        async def sub(ev: LifecycleEvent) -> None:
            await asyncio.sleep(0.01)
            got.append(ev.data["n"])

        bus.subscribe(sub)
        for n in range(20):
            bus.emit("response_sent", n=n)
        assert got == []  # publish only queued them
        started = time.perf_counter()
        await bus.aclose(timeout=2)
        assert got == list(range(20))
        assert time.perf_counter() - started < 1.5
        bus.emit("response_sent", n=99)  # closed: dropped, no error
        await asyncio.sleep(0.02)
        assert got == list(range(20))


# -- hooks ---------------------------------------------------------------------------------


@pytest.fixture
def clean_modules() -> Iterator[None]:
    before = set(sys.modules)
    yield
    for name in set(sys.modules) - before:
        del sys.modules[name]


GOOD_HOOK = """
seen = []

def on_message_received(event):
    seen.append(("received", event.name))

async def on_event(event):
    seen.append(("any", event.name))
"""


@pytest.mark.usefixtures("clean_modules")
class TestHooks:
    async def test_hook_file_is_loaded_and_receives_events(
        self, bus: EventBus, tmp_path: Path
    ) -> None:
        (tmp_path / "greet.py").write_text(GOOD_HOOK)
        hooks = collect_hooks([], tmp_path)
        assert [(name, events) for name, _, events in hooks] == [
            ("greet.py:on_message_received", ["message_received"]),
            ("greet.py:on_event", list(LIFECYCLE_EVENTS)),
        ]
        install_hooks(bus, hooks)
        bus.emit("message_received")
        bus.emit("error")
        await bus.aclose(timeout=2)
        seen = sys.modules["hermes_user_hooks.greet"].seen
        assert sorted(seen) == [("any", "error"), ("any", "message_received"),
                                ("received", "message_received")]  # fmt: skip

    async def test_config_entry_pkg_mod_func(
        self, bus: EventBus, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        pkg = tmp_path / "hermes_test_hookpkg"
        pkg.mkdir()
        (pkg / "__init__.py").write_text("")
        (pkg / "mod.py").write_text(
            "seen = []\n"
            "def func(event):\n    seen.append(event.name)\n"
            "func.events = ['error', 'session_reset']\n"
        )
        monkeypatch.syspath_prepend(str(tmp_path))
        hooks = collect_hooks(["hermes_test_hookpkg.mod:func"], tmp_path / "no-hooks-dir")
        assert [(name, events) for name, _, events in hooks] == [
            ("hermes_test_hookpkg.mod:func", ["error", "session_reset"])
        ]
        install_hooks(bus, hooks)
        for name in ("message_received", "error", "session_reset"):
            bus.emit(name)
        await bus.aclose(timeout=2)
        assert sys.modules["hermes_test_hookpkg.mod"].seen == ["error", "session_reset"]

    def test_broken_hook_files_are_logged_and_skipped(self, tmp_path: Path) -> None:
        (tmp_path / "a_raises.py").write_text("raise RuntimeError('boom')\n")
        (tmp_path / "b_syntax.py").write_text("def (:\n")
        (tmp_path / "c_empty.py").write_text("x = 1\n")
        (tmp_path / "d_good.py").write_text(GOOD_HOOK)
        with capture_logs() as logs:
            hooks = collect_hooks([], tmp_path)
        assert [name for name, _, _ in hooks] == [
            "d_good.py:on_message_received",
            "d_good.py:on_event",
        ]
        failed = [e["path"] for e in logs if e["event"] == "hooks.load_failed"]
        assert [Path(p).name for p in failed] == ["a_raises.py", "b_syntax.py", "c_empty.py"]

    @pytest.mark.parametrize(
        ("entries", "key"),
        [
            (["hermes_no_such_module_xyz:func"], "hooks[0]"),
            (["json:dumps", "json:no_such_function"], "hooks[1]"),
            (["json:__doc__"], "hooks[0]"),
        ],
    )
    def test_bad_config_entry_is_a_config_error(
        self, tmp_path: Path, entries: list[str], key: str
    ) -> None:
        with pytest.raises(ConfigError) as info:
            collect_hooks(entries, tmp_path)
        assert info.value.key == key
        assert entries[-1] in str(info.value)
