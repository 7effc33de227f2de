"""Exactly once on Signal across a SIGKILL of `hermes gateway run`, against the fake signal-cli
daemon: a message in flight is answered once after the restart; a reply part the daemon sent
before the kill, whose answer the gateway never heard, is found by the recipient's delivery
receipt and not sent again; with no receipt to be had, it is sent again (a doubled part rather
than a lost one)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.chaos.killing import Armed, killer
from tests.chaos.test_exactly_once import crash_then_restart, model, start, stop
from tests.e2e.daemon import GatewayProcess
from tests.fakes.openai import FakeOpenAI, text
from tests.fakes.server import wait_until
from tests.fakes.signal import FakeSignalCli

pytestmark = [pytest.mark.e2e]
ALICE = "+15550000002"
PARAGRAPHS = [f"part{n} " + " ".join(f"w{n}x{j}" for j in range(280)) for n in (1, 2, 3)]


@pytest.fixture
def daemon() -> Iterator[FakeSignalCli]:
    fake = FakeSignalCli().start()
    try:
        yield fake
    finally:
        fake.stop()


def gateway(home: Path, llm: FakeOpenAI, fake: FakeSignalCli, **extra: Any) -> GatewayProcess:
    section = {
        "enabled": True,
        "account": fake.account,
        "daemon_url": fake.url,
        "allowed_users": [ALICE],
        **extra,
    }
    runner = {"drain_timeout_s": 3, "stop_grace_s": 1}
    return GatewayProcess(
        home, {"model": model(llm), "runner": runner, "platforms": {"signal": section}}
    )


def killing(fake: FakeSignalCli) -> Armed:
    """The fake's trigger: a send whose text starts with the armed prefix fires it, after the
    daemon sent the message and before its answer reaches the gateway."""
    trigger = Armed()
    fake.after_send = lambda record: trigger.check(str(record.get("message") or ""))
    return trigger


def parts(fake: FakeSignalCli) -> list[str]:
    return [str(m["message"]).split()[0] for m in fake.messages_to(ALICE)]


def test_a_message_in_flight_at_a_sigkill_is_answered_once(
    tmp_path: Path, llm: FakeOpenAI, daemon: FakeSignalCli
) -> None:
    gw = gateway(tmp_path / "home", llm, daemon)
    llm.push(text("too late", delay=30), text("the answer"))  # the first call dies with the gateway
    try:
        start(gw)
        daemon.send_text(ALICE, "in flight")
        wait_until(lambda: len(llm.requests) == 1, timeout=20, explain=gw.story)
        killer(gw)()
        start(gw)
        wait_until(lambda: daemon.messages_to(ALICE), timeout=20, explain=gw.story)
        stop(gw)
    finally:
        gw.kill()
    assert [m["message"] for m in daemon.messages_to(ALICE)] == ["the answer"]
    assert len(llm.requests) == 2  # asked again after the restart, answered once


def test_a_part_the_daemon_sent_before_the_kill_is_not_sent_again(
    tmp_path: Path, llm: FakeOpenAI, daemon: FakeSignalCli
) -> None:
    gw = gateway(tmp_path / "home", llm, daemon)
    llm.push(text("\n\n".join(PARAGRAPHS)))  # three Signal messages
    trigger = killing(daemon)
    try:
        crash_then_restart(gw, trigger, "part2", lambda: daemon.send_text(ALICE, "three parts"))
        wait_until(lambda: len(daemon.messages_to(ALICE)) >= 3, timeout=30, explain=gw.story)
        stop(gw)
    finally:
        gw.kill()
    assert parts(daemon) == ["part1", "part2", "part3"]
    assert len(llm.requests) == 1
    found = [e for e in gw.log_events() if e["event"] == "signal.part_found"]
    assert [e["how"] for e in found] == ["receipt"]


def test_a_part_the_daemon_never_sent_is_sent_after_the_restart(
    tmp_path: Path, llm: FakeOpenAI, daemon: FakeSignalCli
) -> None:
    """The kill comes after the part's intent was recorded, before the daemon sent it: the
    receipts that do come (for part 1, for the progress reaction) are not taken for it."""
    gw = gateway(tmp_path / "home", llm, daemon, sent_check_wait_s=1)
    llm.push(text("\n\n".join(PARAGRAPHS)))
    trigger = Armed()

    def drop(p: dict[str, Any]) -> bool:
        fired = trigger.fired
        trigger.check(str(p.get("message") or ""))
        return trigger.fired and not fired  # the one send that killed: never went out

    daemon.before_send = drop
    try:
        crash_then_restart(gw, trigger, "part2", lambda: daemon.send_text(ALICE, "three parts"))
        wait_until(lambda: len(daemon.messages_to(ALICE)) >= 3, timeout=30, explain=gw.story)
        stop(gw)
    finally:
        gw.kill()
    assert parts(daemon) == ["part1", "part2", "part3"]
    assert any(e["event"] == "signal.part_not_found" for e in gw.log_events())


@pytest.mark.slow  # the fallback; the default suite keeps the found and the never-sent cases
def test_without_a_receipt_the_part_in_doubt_is_sent_again(
    tmp_path: Path, llm: FakeOpenAI, daemon: FakeSignalCli
) -> None:
    gw = gateway(tmp_path / "home", llm, daemon, sent_check_wait_s=0.5)
    llm.push(text("\n\n".join(PARAGRAPHS)))
    daemon.online = False  # the recipient's phone is off: no delivery receipts come
    trigger = killing(daemon)
    try:
        crash_then_restart(gw, trigger, "part1", lambda: daemon.send_text(ALICE, "three parts"))
        wait_until(lambda: len(daemon.messages_to(ALICE)) >= 4, timeout=30, explain=gw.story)
        stop(gw)
    finally:
        gw.kill()
    assert parts(daemon) == ["part1", "part1", "part2", "part3"]
    assert any(e["event"] == "signal.part_not_found" for e in gw.log_events())
