"""The shared retry helper and the typing indicator."""

from __future__ import annotations

import asyncio
import time

import pytest

from hermes_gateway.core.bus import EventBus, LifecycleEvent
from hermes_gateway.errors import (
    PermanentAdapterError,
    RateLimitedError,
    TransientAdapterError,
)
from hermes_gateway.events import MessageEvent
from hermes_gateway.platforms.indicator import TypingIndicator
from hermes_gateway.platforms.retry import with_retry


def flaky(*failures: Exception) -> tuple[list[int], object]:
    calls: list[int] = []

    async def call() -> str:
        calls.append(1)
        if len(calls) <= len(failures):
            raise failures[len(calls) - 1]
        return "ok"

    return calls, call


async def test_retry_after_is_honoured() -> None:
    calls, call = flaky(RateLimitedError("slow down", retry_after=0.2))
    started = time.monotonic()
    assert await with_retry(call, what="t") == "ok"  # type: ignore[arg-type]
    # uvloop may fire a timer up to its 1 ms resolution early
    assert len(calls) == 2 and time.monotonic() - started >= 0.19


async def test_transient_errors_back_off_then_give_up() -> None:
    calls, call = flaky(*(TransientAdapterError("502") for _ in range(3)))
    with pytest.raises(TransientAdapterError):
        await with_retry(call, what="t", attempts=3, base_delay=0.01)  # type: ignore[arg-type]
    assert len(calls) == 3


async def test_permanent_errors_are_not_retried() -> None:
    calls, call = flaky(PermanentAdapterError("blocked"))
    with pytest.raises(PermanentAdapterError):
        await with_retry(call, what="t")  # type: ignore[arg-type]
    assert len(calls) == 1


async def test_stop_event_ends_the_wait() -> None:
    stop = asyncio.Event()
    calls, call = flaky(RateLimitedError("wait", retry_after=30))
    asyncio.get_running_loop().call_later(0.05, stop.set)
    started = time.monotonic()
    with pytest.raises(RateLimitedError):
        await with_retry(call, what="t", stop=stop)  # type: ignore[arg-type]
    assert time.monotonic() - started < 2


async def test_typing_runs_from_start_to_response_and_survives_failures() -> None:
    bus = EventBus()
    sent: list[float] = []

    async def send_typing(message: MessageEvent) -> None:
        sent.append(time.monotonic())
        if len(sent) == 2:
            raise RuntimeError("network blip")  # must not stop the indicator

    indicator = TypingIndicator(bus, "telegram", send_typing, interval=0.05, first_after=0)
    event = MessageEvent.create(
        platform="telegram", chat_type="dm", chat_id="1", user_id="1", message_id="1", text="x"
    )
    bus.publish(LifecycleEvent("processing_start", event.session_key, "run1", event))
    await asyncio.sleep(0.3)
    assert indicator.active == 1 and len(sent) >= 4
    bus.publish(LifecycleEvent("response_sent", event.session_key, "run1", event))
    await asyncio.sleep(0.05)
    count = len(sent)
    await asyncio.sleep(0.2)
    assert indicator.active == 0 and len(sent) == count  # stopped for good
    other = MessageEvent.create(
        platform="slack", chat_type="dm", chat_id="1", user_id="1", message_id="2", text="x"
    )
    bus.publish(LifecycleEvent("processing_start", other.session_key, "run2", other))
    await asyncio.sleep(0.1)
    assert indicator.active == 0  # another platform's runs are not ours
    await bus.aclose()


async def test_typing_has_a_hard_cap() -> None:
    bus = EventBus()
    sent: list[int] = []

    async def send_typing(message: MessageEvent) -> None:
        sent.append(1)

    indicator = TypingIndicator(
        bus, "telegram", send_typing, interval=0.02, max_duration=0.1, first_after=0
    )
    event = MessageEvent.create(
        platform="telegram", chat_type="dm", chat_id="1", user_id="1", message_id="1", text="x"
    )
    bus.publish(LifecycleEvent("processing_start", event.session_key, "r", event))
    await asyncio.sleep(0.3)
    assert indicator.active == 0 and 3 <= len(sent) <= 7
    await bus.aclose()


async def test_a_fast_reply_sends_no_typing_at_all() -> None:
    bus = EventBus()
    sent: list[int] = []

    async def send_typing(message: MessageEvent) -> None:
        sent.append(1)

    TypingIndicator(bus, "telegram", send_typing, interval=0.05, first_after=0.2)
    event = MessageEvent.create(
        platform="telegram", chat_type="dm", chat_id="1", user_id="1", message_id="1", text="x"
    )
    bus.publish(LifecycleEvent("processing_start", event.session_key, "fast", event))
    await asyncio.sleep(0.05)
    bus.publish(LifecycleEvent("response_sent", event.session_key, "fast", event))
    await asyncio.sleep(0.3)
    assert sent == []  # answered within the grace: no indicator at all
    bus.publish(LifecycleEvent("processing_start", event.session_key, "slow", event))
    await asyncio.sleep(0.3)
    bus.publish(LifecycleEvent("response_sent", event.session_key, "slow", event))
    assert len(sent) >= 1  # a slow run still shows it
    await bus.aclose()


async def test_typing_spends_at_most_its_budget_of_calls_a_second() -> None:
    """Three hundred runs starting at once: their indicators share the platform's budget
    (here 100 calls a second) instead of spending 300 calls at once and 300 each interval."""
    bus = EventBus()
    sent: list[float] = []

    async def send_typing(message: MessageEvent) -> None:
        sent.append(time.monotonic())

    indicator = TypingIndicator(
        bus, "telegram", send_typing, interval=0.2, first_after=0, per_second=100
    )
    started = time.monotonic()
    for n in range(300):
        event = MessageEvent.create(
            platform="telegram",
            chat_type="dm",
            chat_id=str(n),
            user_id="1",
            message_id="1",
            text="x",
        )
        bus.publish(LifecycleEvent("processing_start", event.session_key, f"r{n}", event))
    await asyncio.sleep(0.5)
    indicator.stop_all()
    # the burst of 100, then 100 a second: at most 150 in 0.5 s (unbudgeted: 900)
    window = [t for t in sent if t - started <= 0.5]
    assert 100 <= len(window) <= 160
    await bus.aclose()
