"""One user flooding the gateway from many chats at once: held to `runner.max_running_per_user`,
told when a message waits, refused with a notice past `max_waiting_per_user`; another user is
answered at once (the real gateway, Telegram and model fakes)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from adapters.telegram.adapter import TelegramAdapter
from hermes_gateway.core.run import TOO_MANY, WAITING
from tests.fakes.openai import FakeOpenAI
from tests.fakes.telegram import FakeTelegram
from tests.harness import eventually, make_config, running_gateway

TOKEN = "123:ABC"
FLOODER = 666
pytestmark = pytest.mark.filterwarnings("ignore::telegram.warnings.PTBDeprecationWarning")


@pytest.fixture
def tg(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeTelegram]:
    monkeypatch.setattr(TelegramAdapter, "poll_timeout", 1.0)
    with FakeTelegram(token=TOKEN) as fake:
        yield fake


def texts(fake: FakeTelegram, chat_id: int) -> list[str]:
    return [m["text"] for m in fake.messages_to(chat_id)]


async def test_a_flooding_user_waits_its_turn_and_others_do_not(
    tmp_path: Path, fake_llm: FakeOpenAI, tg: FakeTelegram
) -> None:
    telegram = {
        "enabled": True,
        "token": TOKEN,
        "base_url": tg.api_url,
        "base_file_url": tg.file_url,
        "allow_all": True,
        "require_mention": False,
    }
    runner = {"max_running_per_user": 1, "max_waiting_per_user": 1}
    config = make_config(
        tmp_path, fake_llm.base_url, platforms={"telegram": telegram}, runner=runner
    )
    fake_llm.delay = 2.0  # the model takes two seconds: the flood's runs would overlap
    async with running_gateway(config):
        # one session per group chat: three turns at once, were they not capped
        tg.send_text(-101, "flood -101", chat_type="group", user_id=FLOODER)
        await eventually(lambda: fake_llm.in_flight == 1, timeout=10)
        tg.send_text(-102, "flood -102", chat_type="group", user_id=FLOODER)
        await eventually(lambda: texts(tg, -102) == [WAITING["user"]], timeout=10)
        tg.send_text(-103, "flood -103", chat_type="group", user_id=FLOODER)
        refused = TOO_MANY["user"].format(n=1)
        await eventually(lambda: texts(tg, -103) == [refused], timeout=10)
        tg.send_text(7, "hello")  # another user, in a DM: answered beside the flood's run
        await eventually(lambda: texts(tg, 7) == ["echo: hello"], timeout=10)
        await eventually(lambda: texts(tg, -102)[-1:] == ["echo: flood -102"], timeout=10)
        assert texts(tg, -101) == ["echo: flood -101"]
        assert texts(tg, -103) == [refused]  # it never ran
    assert fake_llm.max_in_flight == 2  # the flood's one, then the other user's beside it
