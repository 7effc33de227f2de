"""Two `hermes gateway run` processes on one store and one Redis (`cluster.redis_url`), Telegram
on the fake Bot API: the instance running a session is SIGSTOPped past its lease, the other
takes the session over and answers; SIGCONTinued, the paused one finds its lease lost or has
its answer refused by the store, so the user gets exactly one reply, and the paused one goes
on."""

from __future__ import annotations

import signal
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.e2e.daemon import GatewayProcess
from tests.fakes.openai import FakeOpenAI, text
from tests.fakes.server import wait_until
from tests.fakes.telegram import FakeTelegram
from tests.redis_server import SERVER, needs_redis

pytestmark = [
    pytest.mark.e2e,
    needs_redis,
    pytest.mark.filterwarnings("ignore::telegram.warnings.PTBDeprecationWarning"),
]
TOKEN = "123:ABC"
LEASE_S = 2
CHAT = 555


@pytest.fixture
def tg() -> Iterator[FakeTelegram]:
    with FakeTelegram(token=TOKEN) as fake:
        yield fake


def instance(name: str, tmp_path: Path, llm: FakeOpenAI, fake: FakeTelegram) -> GatewayProcess:
    config: dict[str, Any] = {
        "model": {"base_url": llm.base_url, "api_key": "sk-fake", "max_retries": 0},
        "store": {"url": f"sqlite+aiosqlite:///{tmp_path / 'state.db'}"},
        "cluster": {"redis_url": SERVER, "instance_id": name, "lease_s": LEASE_S},
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
    return GatewayProcess(tmp_path / name, config)


def gave_up(gateway: GatewayProcess) -> bool:
    events = {e["event"] for e in gateway.log_events()}
    return bool(events & {"run.fenced_out", "cluster.lease_lost"})


def owned(gateway: GatewayProcess) -> dict[str, float]:
    status = httpx.get(f"{gateway.url}/status", headers=gateway.operator, timeout=5).json()
    return dict(status["cluster"]["owned"])


def test_a_paused_instance_cannot_reply_for_a_session_taken_over(
    tmp_path: Path, fake_llm: FakeOpenAI, tg: FakeTelegram
) -> None:
    suffix = uuid.uuid4().hex[:8]  # the test Redis is shared: names of this test's own
    first = instance(f"a-{suffix}", tmp_path, fake_llm, tg)
    second = instance(f"b-{suffix}", tmp_path, fake_llm, tg)
    fake_llm.push(text("the paused instance's answer", delay=LEASE_S * 3))
    try:
        first.start()
        tg.send_text(CHAT, "hello")
        wait_until(lambda: len(fake_llm.requests) == 1, timeout=15)  # running on the first
        assert list(owned(first)) == [f"telegram:dm:{CHAT}"]
        first.signal(signal.SIGSTOP)  # paused past its lease, its answer on the way
        second.start()  # its start's replay or its sweep takes the session over
        wait_until(lambda: tg.messages_to(CHAT), timeout=20)
        first.signal(signal.SIGCONT)
        # whichever comes first: its renewal fails (it drops the run, writing nothing), or its
        # answer arrives and the store refuses the turn; either way nothing is sent
        wait_until(lambda: gave_up(first), timeout=20)
        wait_until(lambda: not owned(first), timeout=10)
        first_alive = httpx.get(f"{first.url}/healthz", timeout=5).status_code
        sent = [m["text"] for m in tg.messages_to(CHAT)]
    finally:
        if first.proc is not None and first.proc.poll() is None:
            first.signal(signal.SIGCONT)  # a stopped process ignores SIGTERM
        first.kill()
        second.kill()
    assert sent == ["echo: hello"], (sent, first.stderr(), second.stderr())
    assert first_alive == 200
    assert len(fake_llm.requests) == 2  # one run on each; only the owner's answer went out
