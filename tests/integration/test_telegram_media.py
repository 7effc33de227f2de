"""Telegram attachments go through the core's one downloader: streamed from the Bot API's file
host and refused at `media_max_bytes` as the bytes arrive, never read whole into memory."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from adapters.telegram.adapter import TelegramAdapter
from hermes_gateway.errors import PermanentAdapterError
from hermes_gateway.events import MessageEvent
from tests.fakes.openai import FakeOpenAI
from tests.fakes.telegram import FakeTelegram
from tests.harness import eventually, running_gateway
from tests.integration.test_telegram import TOKEN, tg_config
from tests.integration.test_telegram import fast_adapter as fast_adapter  # autouse fixture

pytestmark = pytest.mark.filterwarnings("ignore::telegram.warnings.PTBDeprecationWarning")
CAP = 1024 * 1024
HUGE = 48 * CAP  # far more than the socket buffers between the fake and the gateway hold


@pytest.fixture
def tg() -> Iterator[FakeTelegram]:
    with FakeTelegram(token=TOKEN) as fake:
        yield fake


@pytest.mark.parametrize("length", [True, False], ids=["content-length", "chunked"])
async def test_a_file_over_the_cap_is_refused_without_being_read_whole(
    tmp_path: Path, fake_llm: FakeOpenAI, tg: FakeTelegram, length: bool
) -> None:
    """The message and getFile both say 1000 bytes; the file is 48 MiB. With a Content-Length
    the download stops at the headers, without one as soon as the cap is passed: either way
    the fake sends only what the sockets buffer before the gateway hangs up."""
    tg.download_length = length
    seen: list[MessageEvent | None] = []
    async with running_gateway(tg_config(tmp_path, fake_llm, tg, media_max_bytes=CAP)) as (gw, _):
        gw.bus.subscribe(lambda ev: seen.append(ev.message), ["message_received"], name="t")
        tg.send_document(555, file_bytes=bytes(HUGE), file_name="huge.bin", announced_size=1000)
        await eventually(lambda: len(seen) == 1)
        adapter = gw.adapters["telegram"]
        assert isinstance(adapter, TelegramAdapter) and seen[0] is not None
        with pytest.raises(PermanentAdapterError, match="cap") as refused:
            await adapter.download(seen[0].attachments[0])
        media = gw.config.home_path / "media"
        left = sorted(p.name for p in media.iterdir()) if media.exists() else []
    sent = sum(tg.downloaded.values())
    assert 0 < sent < HUGE // 2, f"{sent} of {HUGE} bytes sent"
    assert left == []  # no file, no part file
    assert TOKEN not in str(refused.value)


async def test_a_download_is_streamed_to_disk_under_the_files_unique_id(
    tmp_path: Path, fake_llm: FakeOpenAI, tg: FakeTelegram
) -> None:
    tg.download_length = False
    data = bytes(range(256)) * 4096  # 1 MiB: several chunks
    seen: list[MessageEvent | None] = []
    async with running_gateway(tg_config(tmp_path, fake_llm, tg, media_max_bytes=CAP)) as (gw, _):
        gw.bus.subscribe(lambda ev: seen.append(ev.message), ["message_received"], name="t")
        tg.send_document(555, file_bytes=data, file_name="../notes.txt")
        await eventually(lambda: len(seen) == 1)
        adapter = gw.adapters["telegram"]
        assert isinstance(adapter, TelegramAdapter) and seen[0] is not None
        path = await adapter.download(seen[0].attachments[0])
        again = await adapter.download(seen[0].attachments[0])
    assert path == again and path.parent == gw.config.home_path / "media"
    assert path.name == "u1-_notes.txt"
    assert path.read_bytes() == data
    assert sum(tg.downloaded.values()) == len(data)  # the second call found it on disk
