"""Poison told from bad luck, against the real daemon with the default `store.quarantine_after`
and busy policy `queue`, several users chatting (docs/quarantine.md has the rule).

SIGKILLs at random moments set no message aside: each is answered. A message whose processing
kills the gateway (the fake model kills it on that message's first request, as a tool that
crashed the process would) is quarantined once it was the one suspect in flight at two crashes,
its user told, while the others' messages go on being answered, none of them set aside.
"""

from __future__ import annotations

import contextlib
import signal
import sqlite3
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.chaos.crash import CrashReport, _settle, gateway_config, run_crash_chaos
from tests.chaos.kit import (
    ChaosModel,
    ChaosTelegram,
    Driver,
    SlowTool,
    env_number,
    inbox_count,
    record,
    sigkill,
    tally,
)
from tests.e2e.daemon import GatewayProcess
from tests.fakes.openai import FakeOpenAI, Response, hang, last_user_text
from tests.security import keys

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.filterwarnings("ignore::telegram.warnings.PTBDeprecationWarning"),
]
POISON = "render the cursed spreadsheet"
POISON_CHAT = 1999
SLOW_MODEL = (0.3, 1.2)  # runs long enough to be in flight at two kills in a row
PATIENCE = 4.0  # a user writes again after this long without an answer: messages pile up


def check_nothing_set_aside(report: CrashReport, kills: int) -> None:
    f = report.figures
    assert f["kills"] >= kills and report.exit_code == 0, f
    assert f["quarantined"] == 0, f
    lost = f"lost: {report.lost[:20]} kills: {report.kills}\n{report.story}"
    assert f["never_answered"] == 0, lost
    assert f["misrouted"] == 0 and f["error_replies"] == 0, f
    assert f["accepted"] == f["sent"], f
    assert report.doubles_explained, f"doubled outside the send window: {report.doubled}"


@pytest.mark.timeout(300)
def test_random_kills_set_no_message_aside(tmp_path: Path, llm: FakeOpenAI) -> None:
    """Six SIGKILLs at random moments, four users, busy policy `queue`: on a gateway that
    counted every crash against whatever was in flight, messages in flight at two kills in a
    row were quarantined (3 of 24 in the report that found it)."""
    report = run_crash_chaos(
        tmp_path,
        llm,
        rounds=6,
        chats=4,
        seed=11,
        settle=(0.3, 1.0),
        modes=("random",),
        policy="queue",
        quarantine_after=None,
        model_delay=SLOW_MODEL,
        patience=PATIENCE,
        settle_s=90,
        min_sent=12,
    )
    check_nothing_set_aside(report, kills=6)
    assert report.figures["sent"] >= 12


@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_many_random_kills_set_no_message_aside(tmp_path: Path, llm: FakeOpenAI) -> None:
    rounds = int(env_number("HERMES_CHAOS_ROUNDS", 20))
    seed = int(env_number("HERMES_CHAOS_SEED", 5))
    report = run_crash_chaos(
        tmp_path,
        llm,
        rounds=rounds,
        chats=4,
        seed=seed,
        settle=(0.3, 1.5),
        modes=("random",),
        policy="queue",
        quarantine_after=None,
        model_delay=SLOW_MODEL,
        patience=PATIENCE,
        settle_s=90,
    )
    record("bad_luck", report.figures)
    check_nothing_set_aside(report, kills=rounds)


class Poisoned:
    """The fake model: ChaosModel's answers, except that the poison message's request kills
    the gateway on the spot (when it arrives, its process dies)."""

    def __init__(self, gw: GatewayProcess, seed: int) -> None:
        self.gw = gw
        self.chaos = ChaosModel(seed=seed)
        self.deaths: list[float] = []

    def __call__(self, body: dict[str, Any]) -> Response:
        if POISON not in last_user_text(body):
            return self.chaos(body)
        proc = self.gw.proc
        if proc is not None and proc.poll() is None:
            self.deaths.append(time.monotonic())
            sigkill(proc.pid)
        return hang(30)


def _revive(gw: GatewayProcess, timeout: float = 90) -> None:
    """Start the gateway and wait until it is ready or dead again (the poison may kill it
    before the test sees it ready)."""
    gw.kill()
    gw.start(wait=False)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert gw.proc is not None
        if gw.proc.poll() is not None:
            return
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(f"{gw.url}/readyz", timeout=2).status_code == 200:
                return
        time.sleep(0.05)
    raise AssertionError(f"gateway not ready within {timeout}s: {gw.stderr()}")


def told(tg: ChaosTelegram) -> list[float]:
    """When the poison's user was told it is set aside."""
    return [
        at
        for m, at in zip(tg.sent, tg.sent_at, strict=False)
        if m.get("chat_id") == POISON_CHAT and "could not process" in str(m.get("text"))
    ]


def held(home: Path) -> list[tuple[str, int]]:
    query = (
        "SELECT json_extract(payload, '$.text'), attempts FROM inbox "
        "WHERE status = 'quarantined' ORDER BY id"
    )
    with contextlib.closing(sqlite3.connect(home / "state.db")) as db:
        return [(str(t), int(n)) for t, n in db.execute(query)]


@pytest.mark.timeout(300)
def test_a_message_that_kills_the_gateway_is_set_aside_while_others_are_answered(
    tmp_path: Path, llm: FakeOpenAI
) -> None:
    chats = [1001 + i for i in range(4)]
    home = tmp_path / "home"
    tool = SlowTool(home / "workspace", seed=3).start()
    tg = ChaosTelegram().start()
    config = gateway_config(tg, llm, [*chats, POISON_CHAT], "queue", quarantine_after=None)
    gw = GatewayProcess(home, config)
    poisoned = Poisoned(gw, seed=3)
    llm.responder = poisoned
    driver = Driver(tg, chats, seed=3)
    try:
        _revive(gw)
        driver.start()
        time.sleep(2.0)  # the others are chatting: their runs are in flight at the first death
        tg.send_text(POISON_CHAT, POISON)
        deadline = time.monotonic() + 240
        while not told(tg) and time.monotonic() < deadline:
            assert gw.proc is not None
            if gw.proc.poll() is not None:
                _revive(gw)
            time.sleep(0.05)
        assert told(tg), f"the poison was never set aside; deaths: {len(poisoned.deaths)}"
        time.sleep(2.0)  # they chat on after it
        driver.stop()
        _settle(driver, timeout=60)
        gw.signal(signal.SIGTERM)
        assert gw.wait(20) == 0
    finally:
        driver.stop()
        gw.kill()
        tool.stop()
        tg.stop()
        llm.responder = None
    assert held(home) == [(POISON, 2)]  # the poison alone is set aside
    # in flight at the first death with the others (a suspect), then alone on probation twice
    assert len(poisoned.deaths) == 3
    assert sum(POISON in last_user_text(b) for b in llm.requests) == 3  # never a 4th time
    assert len(told(tg)) == 1
    others = [m for m in tg.sent if m.get("chat_id") != POISON_CHAT]
    result = tally(driver.sent, others)
    f = result.figures()
    assert f["never_answered"] == 0, f"lost: {result.lost[:20]}"
    assert f["error_replies"] == 0 and f["misrouted"] == 0, f
    assert inbox_count(home) == len(driver.sent) + 1  # every message was accepted
    first, notice = poisoned.deaths[0], told(tg)[0]
    answered_meanwhile = [
        at
        for m, at in zip(tg.sent, tg.sent_at, strict=False)
        if m.get("chat_id") != POISON_CHAT and first < at < notice
    ]
    assert answered_meanwhile, "nobody else was answered while the poison was being tried"
    keys.assert_no_leaks([*keys.log_files(home)])
