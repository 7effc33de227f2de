"""Two `hermes gateway run` processes on one store and one Redis, polling one bot on the fake Bot
API (which answers a second concurrent getUpdates with 409, as Telegram does): exactly one
polls; with the leader SIGKILLed or stopped the other polls within the lease time, every update
is answered exactly once, and the fake never saw a 409."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.e2e.daemon import GatewayProcess
from tests.fakes.openai import FakeOpenAI
from tests.fakes.server import wait_until
from tests.fakes.telegram import FakeTelegram
from tests.redis_server import RedisProcess

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.filterwarnings("ignore::telegram.warnings.PTBDeprecationWarning"),
]
TOKEN = "123:ABC"
LEASE_S = 3
ROLE = "telegram-poller:123"  # the leader lease of the bot: its id is the token's first part
CHATS = list(range(555, 565))  # one message per chat: no busy policy merges two


@pytest.fixture
def tg() -> Iterator[FakeTelegram]:
    with FakeTelegram(token=TOKEN) as fake:
        yield fake


def instance(
    name: str, tmp_path: Path, llm: FakeOpenAI, fake: FakeTelegram, redis: RedisProcess
) -> GatewayProcess:
    config: dict[str, Any] = {
        "model": {"base_url": llm.base_url, "api_key": "sk-fake", "max_retries": 0},
        "store": {"url": f"sqlite+aiosqlite:///{tmp_path / 'state.db'}"},
        "cluster": {"redis_url": redis.url, "instance_id": name, "lease_s": LEASE_S},
        "platforms": {
            "telegram": {
                "enabled": True,
                "token": TOKEN,
                "base_url": fake.api_url,
                "base_file_url": fake.file_url,
                "allowed_users": CHATS,
            }
        },
    }
    return GatewayProcess(tmp_path / name, config)


def events(gateway: GatewayProcess, name: str) -> list[dict[str, Any]]:
    try:
        return [e for e in gateway.log_events() if e["event"] == name]
    except FileNotFoundError:
        return []


def leading(gateway: GatewayProcess) -> bool:
    return bool(events(gateway, "telegram.poller_leading"))


def survey(gateway: GatewayProcess) -> dict[str, Any]:
    """The cluster as this instance's `/status` shows it."""
    cluster = httpx.get(f"{gateway.url}/status", headers=gateway.operator, timeout=5).json()[
        "cluster"
    ]
    return dict(cluster.get("survey") or {})


def polled_by(gateway: GatewayProcess) -> str | None:
    leader = survey(gateway).get("leaders", {}).get(ROLE)
    return None if leader is None else str(leader["owner"])


def cli_status(gateway: GatewayProcess) -> str:
    cmd = [sys.executable, "-m", "hermes_gateway", "gateway", "status", "--cluster"]
    cmd += ["--url", gateway.url, "--config", str(gateway.config_path)]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=60, check=False).stdout


def replies(fake: FakeTelegram) -> Counter[str]:
    return Counter(m["text"] for chat in CHATS for m in fake.messages_to(chat))


def conflicts(fake: FakeTelegram) -> list[tuple[str, int, str]]:
    return [e for e in fake.errors if e[1] == 409]


@pytest.mark.parametrize("how", ["kill", pytest.param("stop", marks=pytest.mark.slow)])
def test_one_poller_and_a_stand_by_takes_over(
    how: str, tmp_path: Path, fake_llm: FakeOpenAI, tg: FakeTelegram, redis: RedisProcess
) -> None:
    first = instance("a", tmp_path, fake_llm, tg, redis)
    second = instance("b", tmp_path, fake_llm, tg, redis)
    try:
        first.start(wait=False).wait_healthy(60)
        wait_until(lambda: leading(first), timeout=20)
        second.start(wait=False).wait_healthy(60)
        wait_until(lambda: events(second, "telegram.poller_standby"), timeout=20)
        for n in range(5):
            tg.send_text(CHATS[n], f"before {n}")
        wait_until(lambda: sum(replies(tg).values()) == 5, timeout=30)
        time.sleep(LEASE_S)  # several renewals and long polls: the stand-by still waits
        assert not leading(second)
        wait_until(lambda: set(survey(second).get("instances", ())) == {"a", "b"}, timeout=10)
        assert polled_by(second) == "a" == polled_by(first)
        report = cli_status(second) if how == "kill" else ""
        if how == "kill":
            first.kill()
        else:
            first.signal(signal.SIGTERM)
        gone = time.monotonic()
        for n in range(5):
            tg.send_text(CHATS[5 + n], f"after {n}")
        wait_until(lambda: leading(second), timeout=LEASE_S * 4)
        took_over = time.monotonic() - gone
        wait_until(lambda: sum(replies(tg).values()) >= 10, timeout=30)
        wait_until(lambda: polled_by(second) == "b", timeout=15)
        time.sleep(1)  # a reply sent twice would show now
        got = replies(tg)
    finally:
        first.kill()
        second.kill()
    expected = [f"echo: before {n}" for n in range(5)] + [f"echo: after {n}" for n in range(5)]
    assert got == Counter(expected), (got, first.stderr(), second.stderr())
    assert conflicts(tg) == []
    if how == "kill":  # the operator's view while both ran
        assert f"{ROLE}" in report and "a (held" in report, report
        assert "instances" in report and "standing by" in report, report
    # SIGKILL: the lease runs out (plus one stand-by retry); SIGTERM: it is released at once
    assert took_over < LEASE_S + 3, took_over
    print(f"{how}: the stand-by polled {took_over:.2f} s after the leader went")
