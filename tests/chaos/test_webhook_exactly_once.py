"""A webhook route delivering to a Telegram chat (`deliver: telegram:<chat>`), SIGKILLed right
after the fake Telegram took the second part of the answer and before the gateway recorded
it: after the restart the part in doubt is checked (Telegram's edit probe, as for a chat reply
or a job's answer) and not sent again, and the answer is not computed again."""

from __future__ import annotations

import hashlib
import hmac
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.chaos.crash import gateway_config
from tests.chaos.killing import KillingTelegram
from tests.chaos.test_exactly_once import PARAGRAPHS, crash_then_restart, stop
from tests.e2e.daemon import GatewayProcess
from tests.fakes.openai import FakeOpenAI, text
from tests.fakes.server import wait_until

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.filterwarnings("ignore::telegram.warnings.PTBDeprecationWarning"),
]
CHAT = 1001
SECRET = "chaos-route-secret-0123456789"


@pytest.fixture
def tg() -> Iterator[KillingTelegram]:
    fake = KillingTelegram()
    fake.start()
    try:
        yield fake
    finally:
        fake.stop()


def test_a_part_taken_before_the_kill_is_not_sent_again(
    tmp_path: Path, llm: FakeOpenAI, tg: KillingTelegram
) -> None:
    config = gateway_config(tg, llm, [CHAT])
    route = {"secret": SECRET, "template": "alert {n}", "deliver": f"telegram:{CHAT}"}
    config["platforms"]["webhook"] = {"enabled": True, "routes": {"alerts": route}}
    gw = GatewayProcess(tmp_path / "home", config)
    llm.push(text("\n\n".join(PARAGRAPHS)))  # three Telegram messages

    def ask() -> None:
        body, stamp = b'{"n": 1}', int(time.time())
        mac = hmac.new(SECRET.encode(), f"{stamp}.a-1.".encode() + body, hashlib.sha256)
        headers = {
            "X-Hermes-Delivery": "a-1",
            "X-Hermes-Signature": f"t={stamp},v1={mac.hexdigest()}",
        }
        r = httpx.post(f"{gw.url}/webhooks/alerts", content=body, headers=headers, timeout=10)
        assert r.status_code == 202, r.text

    try:
        crash_then_restart(gw, tg.trigger, "part2", ask)
        wait_until(lambda: len(tg.messages_to(CHAT)) >= 3, timeout=20, explain=gw.story)
        stop(gw)
    finally:
        gw.kill()
    assert [m["text"].split()[0] for m in tg.messages_to(CHAT)] == ["part1", "part2", "part3"]
    assert len(llm.requests) == 1  # delivered again, not computed again
    assert [p for name, p in tg.calls if name == "editMessageText"], "part 2 was not checked"
