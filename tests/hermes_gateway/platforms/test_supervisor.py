"""The reconnect supervisor: backoff growth, cap, jitter and reset after a healthy connection,
the health it keeps, stall restarts, giving up, retrying later, a clean stop during a pause,
and a loop that dies being started again. Time is a manual clock where it matters."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

from structlog.testing import capture_logs

from hermes_gateway.errors import AdapterAuthError, TransientAdapterError
from hermes_gateway.platforms.supervisor import Backoff, GiveUp, RetryLater, StallWatch, Supervisor
from tests.hermes_gateway.platforms.manual_time import ManualTime, settle


def test_backoff_grows_to_its_cap_and_resets() -> None:
    backoff = Backoff(first=1, cap=8, factor=2, jitter=0)
    assert [backoff.next() for _ in range(6)] == [1, 2, 4, 8, 8, 8]
    backoff.reset()
    assert backoff.next() == 1


def test_backoff_jitter_spreads_each_wait_within_the_cap() -> None:
    asked: list[tuple[float, float]] = []

    def rng(low: float, high: float) -> float:
        asked.append((low, high))
        return high

    backoff = Backoff(first=1, cap=3, factor=2, jitter=0.25, rng=rng)
    assert [backoff.next() for _ in range(3)] == [1.25, 2.5, 3]  # never past the cap
    assert asked == [(0.75, 1.25)] * 3


class Platform:
    """A ``connect_once`` that plays a script: each step is what one connection does."""

    def __init__(self, *steps: Callable[[Supervisor], object]) -> None:
        self.steps = list(steps)
        self.calls = 0
        self.sup: Supervisor | None = None

    async def connect_once(self) -> None:
        assert self.sup is not None
        self.calls += 1
        step = self.steps.pop(0) if self.steps else hang
        result = step(self.sup)
        if asyncio.iscoroutine(result):
            await result

    def supervise(self, time_: ManualTime, **kw: object) -> Supervisor:
        backoff = Backoff(first=1, cap=8, factor=2, jitter=0)
        self.sup = Supervisor(
            "test",
            self.connect_once,
            backoff=backoff,
            sleep=time_.sleep,
            clock=time_.clock,
            **kw,  # type: ignore[arg-type]
        )
        return self.sup


def fail(sup: Supervisor) -> None:
    raise TransientAdapterError("refused")


async def hang(sup: Supervisor) -> None:
    await asyncio.Event().wait()


def ready_then_fail(sup: Supervisor) -> None:
    sup.ready("up")
    raise TransientAdapterError("dropped")


async def test_failures_back_off_and_a_healthy_connection_resets_the_backoff() -> None:
    time_ = ManualTime()
    platform = Platform(fail, fail, fail, ready_then_fail, fail)
    sup = platform.supervise(time_)
    sup.start()
    for wait in (1, 2, 4, 1, 2):
        await settle()
        assert time_.slept[-1] == wait
        await time_.advance(wait)
    assert platform.calls == 6
    assert sup.failures == 2  # counted afresh after the healthy connection
    await sup.stop()


async def test_only_a_connection_healthy_for_long_enough_resets_the_backoff() -> None:
    time_ = ManualTime()

    def up_for(seconds: float) -> Callable[[Supervisor], object]:
        async def step(sup: Supervisor) -> None:
            sup.ready("up")
            await time_.sleep(seconds)
            raise TransientAdapterError("dropped")

        return step

    platform = Platform(fail, up_for(5), up_for(5), up_for(40))
    sup = platform.supervise(time_, healthy_after=30)
    sup.start()
    await settle()
    for step in (1, 5, 2, 5, 4, 40):
        await time_.advance(step)
    # up for 5 s is not healthy: the backoff grows on; up for 40 s resets it
    assert time_.slept == [1, 5, 2, 5, 4, 40, 1]
    await sup.stop()


async def test_health_follows_the_connection_and_each_change_is_logged_once() -> None:
    time_ = ManualTime()
    platform = Platform(fail, ready_then_fail)
    sup = platform.supervise(time_)
    assert (sup.health.ready, sup.health.detail) == (False, "not started")
    with capture_logs() as logs:
        sup.start()
        await settle()
        assert not sup.health.ready
        assert "TransientAdapterError: refused" in sup.health.detail
        assert "next try in 1.0 s" in sup.health.detail
        await time_.advance(1)  # ready, then dropped
        assert not sup.health.ready and "dropped" in sup.health.detail
        await time_.advance(1)  # the third connection hangs: it is up once it says so
        sup.ready("connected")
        sup.ready("connected")
        assert (sup.health.ready, sup.health.detail) == (True, "connected")
        sup.down("disconnected; reconnecting")
        await sup.stop()
    assert (sup.health.ready, sup.health.detail) == (False, "stopped")
    changes = [(e["ready"], e["detail"]) for e in logs if e["event"] == "adapter.health"]
    assert changes == [
        (True, "up"),
        (False, changes[1][1]),  # the drop, as described
        (True, "connected"),
        (False, "disconnected; reconnecting"),
    ]
    failed = [e["attempt"] for e in logs if e["event"] == "test.connect_failed"]
    assert failed == [1, 1]


async def test_a_connection_without_progress_is_restarted() -> None:
    time_ = ManualTime()
    idle = {"s": 0.0}

    async def up_and_stuck(sup: Supervisor) -> None:
        sup.ready("up")
        await asyncio.Event().wait()

    platform = Platform(up_and_stuck, up_and_stuck)
    sup = platform.supervise(time_, stall=StallWatch(10, lambda: idle["s"], 1, "test.stuck"))
    with capture_logs() as logs:
        sup.start()
        await settle()
        await time_.advance(1)
        await time_.advance(1)
        assert platform.calls == 1 and sup.health.ready  # no progress needed yet
        idle["s"] = 10.0
        await time_.advance(1)  # the watch sees it: restarted after the (reset) backoff
        assert not sup.health.ready and "no progress" in sup.health.detail
        idle["s"] = 0.0
        await time_.advance(1)
    assert platform.calls == 2 and sup.health.ready
    assert [e["idle_s"] for e in logs if e["event"] == "test.stuck"] == [10.0]
    await sup.stop()


async def test_progress_reported_by_the_platform_keeps_a_connection_alive() -> None:
    time_ = ManualTime()

    async def up_and_talking(sup: Supervisor) -> None:
        sup.ready("up")
        for _ in range(5):
            await time_.sleep(3)
            sup.progress()
        await asyncio.Event().wait()

    platform = Platform(up_and_talking)
    sup = platform.supervise(time_, stall=StallWatch(5))
    sup.start()
    await settle()
    for _ in range(15):
        await time_.advance(1)
    assert platform.calls == 1 and sup.health.ready
    for _ in range(6):
        await time_.advance(1)  # silent for 6 s now
    assert platform.calls == 2
    await sup.stop()


async def test_a_rejected_token_gives_up_and_keeps_the_reason() -> None:
    time_ = ManualTime()
    cause = AdapterAuthError("token rejected")

    def reject(sup: Supervisor) -> None:
        raise GiveUp("the bot token was rejected") from cause

    platform = Platform(reject)
    sup = platform.supervise(time_)
    sup.start()
    await sup.settled(5)
    await settle()
    assert sup.fatal is cause
    assert (sup.health.ready, sup.health.detail) == (False, "the bot token was rejected")
    await time_.advance(100)
    assert platform.calls == 1 and time_.slept == []


async def test_retry_later_waits_as_asked_without_growing_the_backoff() -> None:
    time_ = ManualTime()

    def locked(sup: Supervisor) -> None:
        raise RetryLater(10, "another gateway holds the lock")

    platform = Platform(locked, locked, fail)
    sup = platform.supervise(time_)
    sup.start()
    await sup.settled(5)
    assert sup.health.detail == "another gateway holds the lock"
    await time_.advance(10)
    await time_.advance(10)
    assert time_.slept == [10, 10, 1]  # the first failure still waits the first delay
    await sup.stop()


async def test_stop_during_a_pause_returns_at_once() -> None:
    platform = Platform(fail)
    platform.sup = sup = Supervisor(
        "test", platform.connect_once, backoff=Backoff(first=600, cap=600)
    )
    sup.start()
    await sup.settled(5)
    started = time.monotonic()
    await sup.stop()
    assert time.monotonic() - started < 5  # not the 600 s pause
    assert platform.calls == 1 and sup.health.detail == "stopped"


async def test_a_supervisor_whose_loop_dies_is_started_again() -> None:
    describe_calls: list[int] = []

    def describe(failures: int, exc: BaseException, wait: float) -> str:
        describe_calls.append(failures)
        if len(describe_calls) == 1:
            raise RuntimeError("a bug in the supervisor's own loop")
        return "retrying"

    platform = Platform(fail, fail)
    platform.sup = sup = Supervisor(
        "test",
        platform.connect_once,
        backoff=Backoff(first=0.01, cap=0.01),
        describe=describe,
    )
    with capture_logs() as logs:
        sup.start()
        deadline = time.monotonic() + 5
        while platform.calls < 3 and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
    await sup.stop()
    assert platform.calls >= 3
    assert "test.supervisor_died" in [e["event"] for e in logs]
