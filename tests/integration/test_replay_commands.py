"""Commands left unanswered by a crash: not carried out after the restart (a /stop or /new meant
a state that is gone), but never dropped unsaid; `/queue` and `/steer` carry a message, which
runs. Real python-telegram-bot against `FakeTelegram`, the inbox seeded as a kill leaves it."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest

from hermes_gateway.events import MessageEvent
from hermes_gateway.store.store import Store
from tests.fakes.openai import FakeOpenAI
from tests.fakes.telegram import FakeTelegram
from tests.harness import dm, running_gateway
from tests.integration.test_telegram import TOKEN, tg_config, user_texts
from tests.integration.test_telegram import fast_adapter as fast_adapter  # autouse fixture

pytestmark = pytest.mark.filterwarnings("ignore::telegram.warnings.PTBDeprecationWarning")


@pytest.fixture
def tg() -> Iterator[FakeTelegram]:
    with FakeTelegram(token=TOKEN) as fake:
        yield fake


def left_over(chat: int, text: str) -> MessageEvent:
    return dm("1", text, chat=str(chat))


async def test_left_over_commands_are_run_or_answered_after_a_restart(
    tmp_path: Path, fake_llm: FakeOpenAI, tg: FakeTelegram
) -> None:
    config = tg_config(tmp_path, fake_llm, tg)
    store = Store(config.store_url)
    await store.open()
    for chat, text in ((701, "/queue write the report"), (702, "/steer be brief"), (703, "/new")):
        assert await store.accept(left_over(chat, text)) is not None  # then the crash
    await store.close()
    async with running_gateway(config):
        [queued] = await tg.wait_sent(1, chat_id=701)
        [steered] = await tg.wait_sent(1, chat_id=702)
        [told] = await tg.wait_sent(1, chat_id=703)
    assert queued["text"] == "echo: write the report"
    assert steered["text"] == "echo: be brief"
    assert "restarted before I could act on /new" in told["text"]
    assert sorted(user_texts(fake_llm)) == ["be brief", "write the report"]  # /new ran no model
    with sqlite3.connect(config.home_path / "state.db") as db:
        statuses = dict(db.execute("SELECT chat_id, status FROM inbox"))
    assert statuses == {"701": "answered", "702": "answered", "703": "dropped"}
