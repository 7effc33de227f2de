"""`hermes gateway run` SIGKILLed in the middle of a reply, then restarted: a kill between the
parts of a long answer costs no part twice, and a kill while an answer streams into its live
preview leaves no half-written preview behind. The windows are made deterministic by a fake
Telegram that holds the call the test aims at until the process is dead."""

from __future__ import annotations

import asyncio
import signal
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.chaos.crash import gateway_config
from tests.chaos.kit import ChaosTelegram
from tests.e2e.daemon import GatewayProcess
from tests.fakes.openai import FakeOpenAI, text
from tests.fakes.server import wait_until
from tests.fakes.telegram import ApiError, plain_text
from tests.security import keys

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.filterwarnings("ignore::telegram.warnings.PTBDeprecationWarning"),
]
CHAT = 1001
Match = Callable[[dict[str, Any]], bool]


class HoldingTelegram(ChaosTelegram):
    """Holds the next call of a method whose parameters match: neither shown to the chat nor
    answered until `release` (the test kills the gateway meanwhile), then refused."""

    def __init__(self, **kw: Any) -> None:
        super().__init__(**kw)
        self.held = threading.Event()
        self._hold: tuple[str, Match] | None = None
        self._release: asyncio.Event | None = None

    def hold(self, method: str, match: Match) -> None:
        self._hold = (method, match)

    def release(self) -> None:
        if self._release is not None:
            self.call_soon(self._release.set)

    async def _send_message(self, p: dict[str, Any]) -> dict[str, Any]:
        await self._maybe_hold("sendMessage", p)
        return await super()._send_message(p)

    async def _maybe_hold(self, method: str, p: dict[str, Any]) -> None:
        if self._hold is None or self._hold[0] != method or not self._hold[1](p):
            return
        self._hold, self._release = None, asyncio.Event()
        self.held.set()
        try:
            await asyncio.wait_for(self._release.wait(), 30)
        except TimeoutError:
            pass
        raise ApiError(502, "Bad Gateway")  # to a process that is gone by now


@pytest.fixture
def tg() -> Iterator[HoldingTelegram]:
    fake = HoldingTelegram().start()
    try:
        yield fake
    finally:
        fake.stop()


def start(gw: GatewayProcess) -> None:
    gw.start()
    wait_until(lambda: httpx.get(f"{gw.url}/readyz", timeout=2).status_code == 200, timeout=30)


def shown(tg: ChaosTelegram) -> list[str]:
    return [plain_text(m["text"], m["parse_mode"]) for m in tg.messages_to(CHAT)]


def stop(gw: GatewayProcess, home: Path) -> None:
    gw.signal(signal.SIGTERM)
    assert gw.wait(20) == 0
    keys.assert_no_leaks(keys.log_files(home))


def test_a_kill_between_parts_sends_only_the_rest_after_the_restart(
    tmp_path: Path, llm: FakeOpenAI, tg: HoldingTelegram
) -> None:
    home = tmp_path / "home"
    gw = GatewayProcess(home, gateway_config(tg, llm, [CHAT]))
    paragraphs = [f"part{n} " + " ".join(f"w{n}x{j}" for j in range(400)) for n in (1, 2, 3)]
    llm.push(text("\n\n".join(paragraphs)))  # three Telegram messages
    tg.hold("sendMessage", lambda p: str(p.get("text", "")).startswith("part2"))
    try:
        start(gw)
        tg.send_text(CHAT, "three parts please")
        assert tg.held.wait(20), "part 2 never went out"
        gw.kill()  # SIGKILL: part 1 delivered (and recorded), part 2 on its way
        tg.release()
        assert [t.split()[0] for t in shown(tg)] == ["part1"]
        start(gw)
        wait_until(lambda: len(tg.messages_to(CHAT)) >= 3, timeout=20)
        stop(gw, home)
    finally:
        gw.kill()
    assert [t.split()[0] for t in shown(tg)] == ["part1", "part2", "part3"]
    assert " ".join(shown(tg)).split() == "\n\n".join(paragraphs).split()
    assert len(llm.requests) == 1  # the stored reply was resent, not computed again


def test_a_kill_mid_stream_leaves_no_half_written_preview(
    tmp_path: Path, llm: FakeOpenAI, tg: HoldingTelegram
) -> None:
    home = tmp_path / "home"
    config = gateway_config(tg, llm, [CHAT])
    config["platforms"]["telegram"]["streaming"] = True
    gw = GatewayProcess(home, config)
    llm.push(text(" ".join(f"s{i}" for i in range(400)), chunk_size=4, chunk_delay=0.05))
    final = "the answer, written again after the restart"
    llm.push(text(final))
    try:
        start(gw)
        tg.send_text(CHAT, "stream a long answer")
        wait_until(lambda: tg.messages_to(CHAT) and tg.messages_to(CHAT)[0]["edits"] >= 1, 20)
        gw.kill()  # SIGKILL mid-stream: the preview shows a few words of the first answer
        [preview] = tg.messages_to(CHAT)
        assert preview["text"].startswith("s0 s1") and not preview["text"].endswith("s399")
        start(gw)
        wait_until(lambda: tg.messages_to(CHAT)[0]["text"] == final, timeout=20)
        stop(gw, home)
    finally:
        gw.kill()
    [only] = tg.messages_to(CHAT)  # the rerun finished the preview instead of posting anew
    assert (only["message_id"], only["text"]) == (preview["message_id"], final)
    assert len(llm.requests) == 2
