"""Files the agent sends (`send_file`) on Telegram, end to end through `hermes gateway run`: the
text then the file as native uploads, once; a SIGKILL between the text and the upload (or right
after Telegram took the upload) leaves exactly one of each after the restart; a file over the
Bot API's limit is refused to the model and the user still gets the text."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.chaos.crash import gateway_config
from tests.chaos.killing import KillingTelegram
from tests.chaos.test_exactly_once import crash_then_restart, start, stop
from tests.e2e.daemon import GatewayProcess
from tests.fakes.openai import FakeOpenAI, text, tool_calls
from tests.fakes.server import wait_until

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.filterwarnings("ignore::telegram.warnings.PTBDeprecationWarning"),
]
CHAT = 1001
CSV = "a,b\n1,2\n"
PNG = b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 4
ANSWER = "Here is the report and the chart."


@pytest.fixture
def ktg() -> Iterator[KillingTelegram]:
    fake = KillingTelegram().start()
    try:
        yield fake
    finally:
        fake.stop()


def media_gateway(home: Path, tg: KillingTelegram, llm: FakeOpenAI) -> GatewayProcess:
    config = gateway_config(tg, llm, [CHAT])
    config["tools"] = {"enabled": ["write_file", "send_file"]}
    gw = GatewayProcess(home, config)
    (home / "workspace").mkdir(parents=True, exist_ok=True)
    (home / "workspace" / "chart.png").write_bytes(PNG)
    return gw


def script(llm: FakeOpenAI) -> None:
    """The model writes a CSV, sends it, then sends a chart it drew earlier, then answers."""
    llm.push(
        tool_calls(("write_file", {"path": "report.csv", "content": CSV})),
        tool_calls(("send_file", {"path": "report.csv", "caption": "the numbers"})),
        tool_calls(("send_file", {"path": "chart.png"})),
        text(ANSWER),
    )


def delivered(tg: KillingTelegram) -> list[tuple[str, Any]]:
    """What the chat shows, in order: (text, the text) or (method, file name and bytes)."""
    shown: list[tuple[int, tuple[str, Any]]] = [
        (m["message_id"], ("text", m["text"])) for m in tg.messages_to(CHAT)
    ]
    for u in tg.uploads:
        kind = "photo" if u.get("photo") else "document"
        shown.append((u["message_id"], (kind, (u["file_name"], u["data"], u.get("caption")))))
    return [what for _, what in sorted(shown, key=lambda item: item[0])]


EXPECTED = [
    ("text", ANSWER),
    ("document", ("report.csv", CSV.encode(), "the numbers")),
    ("photo", ("chart.png", PNG, None)),
]


def test_the_files_go_after_the_text_once_each(
    tmp_path: Path, llm: FakeOpenAI, ktg: KillingTelegram
) -> None:
    gw = media_gateway(tmp_path / "home", ktg, llm)
    script(llm)
    try:
        start(gw)
        ktg.send_text(CHAT, "report please")
        wait_until(lambda: len(ktg.uploads) >= 2, timeout=30)
        stop(gw)
    finally:
        gw.kill()
    assert delivered(ktg) == EXPECTED
    results = [m for m in llm.requests[-1]["messages"] if m["role"] == "tool"]
    assert "will be sent after your answer" in results[1]["content"]


@pytest.mark.parametrize("cut", ["text", "upload"])
def test_a_kill_between_the_text_and_the_upload_leaves_one_of_each(
    tmp_path: Path, llm: FakeOpenAI, ktg: KillingTelegram, cut: str
) -> None:
    """``text``: killed once Telegram took the text (the text is in doubt, the files not yet
    sent); ``upload``: killed once it took the CSV, before the gateway heard back (the upload
    is in doubt: found by its caption, not sent again)."""
    gw = media_gateway(tmp_path / "home", ktg, llm)
    script(llm)
    prefix = "Here" if cut == "text" else "file:report.csv"
    try:
        crash_then_restart(gw, ktg.trigger, prefix, lambda: ktg.send_text(CHAT, "report"))
        wait_until(lambda: len(ktg.uploads) >= 2, timeout=30)
        stop(gw)
    finally:
        gw.kill()
    assert delivered(ktg) == EXPECTED
    assert len(llm.requests) == 4  # the stored answer was sent again, not computed again


def test_a_file_over_the_limit_is_refused_to_the_model_and_the_text_still_goes(
    tmp_path: Path, llm: FakeOpenAI, ktg: KillingTelegram
) -> None:
    gw = media_gateway(tmp_path / "home", ktg, llm)
    big = tmp_path / "home" / "workspace" / "huge.bin"
    with big.open("wb") as fh:  # sparse: 51 MB on paper, nothing on disk
        fh.truncate(51 * 1024 * 1024)
    llm.push(tool_calls(("send_file", {"path": "huge.bin"})), text("It is too big to send."))
    try:
        start(gw)
        ktg.send_text(CHAT, "send the big one")
        wait_until(lambda: len(ktg.messages_to(CHAT)) >= 1, timeout=30)
        stop(gw)
    finally:
        gw.kill()
    assert ktg.uploads == []
    assert [m["text"] for m in ktg.messages_to(CHAT)] == ["It is too big to send."]
    told = next(m for m in llm.requests[-1]["messages"] if m["role"] == "tool")["content"]
    assert "51.0 MB" in told and "50.0 MB" in told
    assert os.path.getsize(big) == 51 * 1024 * 1024
