"""A message whose processing takes the gateway down is quarantined, not replayed into a crash
loop: `hermes gateway run` on the fake Telegram, the fake model hanging on that message (the
run stays in flight) and the process SIGKILLed in it, as a frozen gateway would be.

The first death makes it a suspect (nothing shows yet that it caused it); replayed on its own,
on probation, it dies twice more, and each of those deaths is counted against it. After them
the next start holds the message back: no model request for it, the user is told, `hermes
gateway status` and `hermes inbox list` show it, and `hermes inbox retry` gets it answered. A
SIGTERM whose drain interrupts the run is no crash and does not count.
The control routes behind `hermes inbox` are checked in process too.
"""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from hermes_gateway.events import MessageEvent
from hermes_gateway.store.store import Store
from tests.e2e.daemon import GatewayProcess
from tests.fakes.openai import FakeOpenAI, Response, hang, last_user_text, text
from tests.fakes.server import wait_until
from tests.fakes.telegram import FakeTelegram
from tests.harness import make_config, running_gateway

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.filterwarnings("ignore::telegram.warnings.PTBDeprecationWarning"),
]
TOKEN = "123:ABC"
CHAT = 555
POISON = "summarize the huge file"
WAIT = 30.0  # generous: a start on a loaded 2-core host takes ~10 s


@pytest.fixture
def tg() -> Iterator[FakeTelegram]:
    with FakeTelegram(token=TOKEN) as fake:
        yield fake


@pytest.fixture
def poisoned(fake_llm: FakeOpenAI) -> FakeOpenAI:
    """The model never answers the poison message (its run stays in flight); others get an
    echo."""

    def respond(body: dict[str, Any]) -> Response:
        said = last_user_text(body)
        return hang(60) if POISON in said else text(f"echo: {said}")

    fake_llm.responder = respond
    return fake_llm


def gateway(home: Path, llm: FakeOpenAI, fake: FakeTelegram, after: int = 2) -> GatewayProcess:
    config: dict[str, Any] = {
        "model": {"base_url": llm.base_url, "api_key": "sk-fake", "max_retries": 0},
        "runner": {"drain_timeout_s": 1, "stop_grace_s": 1},
        "store": {"quarantine_after": after},
        "platforms": {
            "telegram": {
                "enabled": True,
                "token": TOKEN,
                "base_url": fake.api_url,
                "base_file_url": fake.file_url,
                "allowed_users": [CHAT],
            }
        },
    }
    return GatewayProcess(home, config)


def poison_requests(llm: FakeOpenAI) -> int:
    return sum(POISON in last_user_text(body) for body in llm.requests)


def start_ready(gw: GatewayProcess) -> None:
    gw.start(wait=False)
    gw.wait_healthy(WAIT)
    wait_until(lambda: httpx.get(f"{gw.url}/readyz", timeout=2).status_code == 200, timeout=WAIT)


def run_until_in_flight(gw: GatewayProcess, llm: FakeOpenAI, nth: int) -> None:
    """Start the gateway and wait for the poison message's ``nth`` model request."""
    start_ready(gw)
    wait_until(lambda: poison_requests(llm) >= nth, timeout=WAIT, explain=gw.story)
    assert poison_requests(llm) == nth


def sigkill(gw: GatewayProcess) -> None:
    gw.signal(signal.SIGKILL)
    assert gw.wait(10) == -signal.SIGKILL


def hermes(gw: GatewayProcess, group: str, *rest: str) -> subprocess.CompletedProcess[str]:
    """The operator's CLI on the gateway's config: `hermes inbox --config X list`, `hermes
    gateway status --config X` (the option belongs to the parser that declares it)."""
    config = ["--config", str(gw.config_path)]
    args = [group, *config, *rest] if group == "inbox" else [group, *rest, *config]
    argv = [sys.executable, "-m", "hermes_gateway", *args]
    return subprocess.run(argv, capture_output=True, text=True, timeout=30, env=gw.env)


def quarantined_logs(gw: GatewayProcess) -> list[dict[str, Any]]:
    return [e for e in gw.log_events() if e["event"] == "inbox.quarantined"]


def told(fake: FakeTelegram) -> list[str]:
    return [m["text"] for m in fake.messages_to(CHAT) if "could not process" in m["text"]]


@pytest.mark.timeout(300)  # five starts, two of them with a probation calm
def test_a_message_that_kills_the_gateway_twice_is_quarantined_then_retried(
    tmp_path: Path, poisoned: FakeOpenAI, tg: FakeTelegram
) -> None:
    gw = gateway(tmp_path / "home", poisoned, tg)
    try:
        start_ready(gw)
        tg.send_text(CHAT, POISON)
        wait_until(lambda: poison_requests(poisoned) == 1, timeout=WAIT)
        sigkill(gw)  # death 1, the run in flight: a suspect
        run_until_in_flight(gw, poisoned, 2)  # replayed on probation, and in flight again
        sigkill(gw)  # death 2, counted
        run_until_in_flight(gw, poisoned, 3)
        sigkill(gw)  # death 3, counted
        start_ready(gw)
        wait_until(lambda: told(tg), timeout=WAIT)
        tg.send_text(CHAT, "are you there?")  # the gateway and the session work on
        echoed = "echo: are you there?"
        wait_until(lambda: echoed in [m["text"] for m in tg.messages_to(CHAT)], timeout=WAIT)
        assert poison_requests(poisoned) == 3  # not run a fourth time
        [held] = quarantined_logs(gw)
        assert (held["attempts"], held["session_key"]) == (2, f"telegram:dm:{CHAT}")
        inbox_id = held["inbox_id"]

        status = hermes(gw, "gateway", "status")
        assert "quarantined  1" in status.stdout, status
        assert f"telegram:dm:{CHAT}" in status.stdout and POISON in status.stdout
        listed = hermes(gw, "inbox", "list")
        assert listed.returncode == 0 and POISON in listed.stdout, listed
        [entry] = httpx.get(f"{gw.url}/status", headers=gw.operator, timeout=5).json()[
            "quarantined"
        ]
        assert (entry["id"], entry["attempts"]) == (inbox_id, 2)

        poisoned.responder = lambda body: text(f"echo: {last_user_text(body)}")  # fixed
        retried = hermes(gw, "inbox", "retry", str(inbox_id))
        assert retried.returncode == 0, retried
        answered = f"echo: {POISON}"
        wait_until(lambda: answered in [m["text"] for m in tg.messages_to(CHAT)], timeout=WAIT)
        assert (
            httpx.get(f"{gw.url}/status", headers=gw.operator, timeout=5).json()["quarantined"]
            == []
        )
        assert hermes(gw, "inbox", "retry", str(inbox_id)).returncode == 1  # not held now
    finally:
        gw.kill()
    assert len(told(tg)) == 1


@pytest.mark.timeout(300)
def test_a_sigterm_drain_is_no_crash_and_drop_works_offline(
    tmp_path: Path, poisoned: FakeOpenAI, tg: FakeTelegram
) -> None:
    """With `quarantine_after: 1`: had the clean stop counted, the second start would hold
    the message back; it runs it again, a death makes it a suspect, and the first death on
    probation is what quarantines it."""
    gw = gateway(tmp_path / "home", poisoned, tg, after=1)
    try:
        start_ready(gw)
        tg.send_text(CHAT, POISON)
        wait_until(lambda: poison_requests(poisoned) == 1, timeout=WAIT)
        gw.signal(signal.SIGTERM)  # the drain (1 s) interrupts the run: a clean stop
        assert gw.wait(20) == 0
        run_until_in_flight(gw, poisoned, 2)  # replayed as before, not quarantined
        assert quarantined_logs(gw) == []
        sigkill(gw)  # a death: a suspect
        run_until_in_flight(gw, poisoned, 3)  # not quarantined: on probation
        assert quarantined_logs(gw) == []
        sigkill(gw)  # a death on probation
        start_ready(gw)
        wait_until(lambda: told(tg), timeout=WAIT)
        assert poison_requests(poisoned) == 3
        [held] = quarantined_logs(gw)
        assert held["attempts"] == 1
        gw.signal(signal.SIGTERM)
        assert gw.wait(20) == 0
    finally:
        gw.kill()
    # the gateway is down: the CLI works on the store itself
    listed = hermes(gw, "inbox", "list")
    assert POISON in listed.stdout, listed
    dropped = hermes(gw, "inbox", "drop", str(held["inbox_id"]))
    assert dropped.returncode == 0 and "not running" in dropped.stdout, dropped
    assert "no quarantined messages" in hermes(gw, "inbox", "list").stdout


async def test_the_inbox_routes_list_release_and_refuse(
    tmp_path: Path, fake_llm: FakeOpenAI
) -> None:
    """In process, on the local API platform: an entry an earlier start quarantined is in
    `/status`; the routes want the token, a number, a quarantined entry; a retry answers it."""
    token = "q" * 32
    config = make_config(tmp_path, fake_llm.base_url, control={"token": token})
    store = Store(config.store_url)
    await store.open()
    event = MessageEvent.create(
        platform="api",
        chat_type="dm",
        chat_id="alice",
        user_id="alice",
        message_id="m1",
        text="hello again",
        user_name="alice",
    )
    inbox_id = await store.accept(event)
    assert inbox_id is not None
    for _ in range(2):  # two crashes, each time on probation
        await store.begin_attempt([inbox_id], probation=True)
        held = await store.quarantine(2, 3600)
    assert len(held) == 1
    await store.close()
    auth = {"Authorization": f"Bearer {token}"}
    async with running_gateway(config) as (gw, client):
        http, base = client.http, client.base

        async def post(path: str, headers: dict[str, str] = auth) -> int:
            async with http.post(f"{base}{path}", headers=headers) as resp:
                return resp.status

        async with http.get(f"{base}/status", headers=auth) as resp:
            [held] = (await resp.json())["quarantined"]
        assert (held["id"], held["attempts"], held["text"]) == (inbox_id, 2, "hello again")
        assert await post(f"/inbox/{inbox_id}/retry", headers={}) == 401
        assert await post("/inbox/abc/retry") == 400
        assert await post(f"/inbox/{inbox_id + 1}/drop") == 404
        assert fake_llm.requests == []
        assert await post(f"/inbox/{inbox_id}/retry") == 200

        async def answered() -> bool:
            async with http.get(f"{base}/v1/history", params={"user": "alice"}, headers=auth) as r:
                return any(
                    m["content"] == "echo: hello again" for m in (await r.json())["messages"]
                )

        for _ in range(300):
            if await answered():
                break
            await asyncio.sleep(0.1)
        assert await answered()
        assert gw.inbox.summaries() == []
        assert await post(f"/inbox/{inbox_id}/drop") == 404  # not quarantined any more
