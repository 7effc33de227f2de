"""`hermes gateway run` as a real process on Signal, against the fake signal-cli daemon
(`tests.fakes.signal`): a DM answered with a quote and the progress reaction, a stranger paired,
a group answered only when mentioned, a command, a long answer split, attachments named and
fetched on demand, junk on the stream skipped, and the daemon restarting with messages waiting."""

from __future__ import annotations

import base64
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.e2e.daemon import GatewayProcess
from tests.e2e.test_toy_platform import hermes
from tests.fakes.openai import FakeOpenAI, text, tool_calls
from tests.fakes.server import wait_until
from tests.fakes.signal import FakeSignalCli
from tests.integration.test_tools_gateway import PNG

pytestmark = [pytest.mark.e2e]
ALICE, MALLORY, CAROL = "+15550000002", "+15550000003", "+15550000004"
GROUP = "R3JvdXBJZEJhc2U2NEdyb3VwSWRCYXNlNjQ9PT09PT0="


@pytest.fixture
def daemon() -> Iterator[FakeSignalCli]:
    fake = FakeSignalCli().start()
    try:
        yield fake
    finally:
        fake.stop()


def signal_gateway(
    home: Path, llm: FakeOpenAI, fake: FakeSignalCli, **extra: Any
) -> GatewayProcess:
    section = {
        "enabled": True,
        "account": fake.account,
        "daemon_url": fake.url,
        "allowed_users": [ALICE],
        "pairing": True,
        **extra,
    }
    model = {"base_url": llm.base_url, "api_key": "sk-fake", "max_retries": 0, "vision": True}
    tools = {"enabled": ["read_file", "write_file", "send_file", "vision_analyze"]}
    return GatewayProcess(home, {"model": model, "tools": tools, "platforms": {"signal": section}})


def ready(gateway: GatewayProcess) -> bool:
    return httpx.get(f"{gateway.url}/readyz", timeout=2).status_code == 200


def texts_to(fake: FakeSignalCli, chat: str) -> list[str]:
    return [str(m.get("message")) for m in fake.messages_to(chat)]


def test_signal_chats_end_to_end(
    tmp_path: Path, fake_llm: FakeOpenAI, daemon: FakeSignalCli
) -> None:
    gateway = signal_gateway(tmp_path / "home", fake_llm, daemon)
    daemon.groups[GROUP] = [ALICE, MALLORY, CAROL]
    try:
        gateway.start()
        wait_until(lambda: ready(gateway), timeout=20, explain=gateway.story)
        _a_dm_is_answered_with_a_quote_and_the_progress_reaction(daemon)
        _a_stranger_is_paired_and_then_answered(gateway, fake_llm, daemon)
        _a_group_is_answered_only_when_mentioned_or_replied_to(fake_llm, daemon)
        _a_command_and_a_long_answer(fake_llm, daemon)
        _attachments_are_named_and_fetched_on_demand(fake_llm, daemon)
        _junk_on_the_stream_is_skipped(gateway, daemon)
        _a_file_goes_as_an_attachment_and_typing_shows_while_working(fake_llm, daemon)
        gateway.signal(signal.SIGTERM)
        assert gateway.wait(20) == 0, gateway.stderr()
    finally:
        gateway.kill()


def _a_dm_is_answered_with_a_quote_and_the_progress_reaction(daemon: FakeSignalCli) -> None:
    ts = daemon.send_text(ALICE, "hello from signal")
    [reply] = wait_until(lambda: daemon.messages_to(ALICE), timeout=20)
    assert reply["message"] == "echo: hello from signal"
    assert (reply["quoteTimestamp"], reply["quoteAuthor"]) == (ts, ALICE)
    wait_until(lambda: len(daemon.reactions) == 2, timeout=10)  # shown, then taken off
    shown, removed = daemon.reactions
    assert (shown["targetTimestamp"], shown["targetAuthor"], shown["remove"]) == (ts, ALICE, False)
    assert (removed["targetTimestamp"], removed["emoji"], removed["remove"]) == (ts, "👀", True)


def _a_stranger_is_paired_and_then_answered(
    gateway: GatewayProcess, llm: FakeOpenAI, daemon: FakeSignalCli
) -> None:
    asked = len(llm.requests)
    daemon.send_text(MALLORY, "let me in")
    [code_reply] = wait_until(lambda: texts_to(daemon, MALLORY), timeout=20)
    assert "hermes pairing approve signal " in code_reply
    assert len(llm.requests) == asked  # no model call for a stranger
    code = code_reply.split("hermes pairing approve signal ")[1].split()[0]
    approved = hermes(gateway, "pairing", "--config", "CONFIG", "approve", "signal", code)
    assert approved.returncode == 0, approved.stderr
    wait_until(lambda: len(texts_to(daemon, MALLORY)) == 2, timeout=20)  # the welcome
    daemon.send_text(MALLORY, "now?")
    wait_until(lambda: len(texts_to(daemon, MALLORY)) == 3, timeout=20)
    assert texts_to(daemon, MALLORY)[2] == "echo: now?"


def _a_group_is_answered_only_when_mentioned_or_replied_to(
    llm: FakeOpenAI, daemon: FakeSignalCli
) -> None:
    asked = len(llm.requests)
    me = [daemon.mention_of_me()]
    daemon.send_text(CAROL, "\ufffc let me in too", group=GROUP, mentions=me)  # not allowed
    daemon.send_text(ALICE, "just chatting", group=GROUP)
    daemon.send_text(ALICE, "\ufffc what is up", group=GROUP, mentions=[daemon.mention_of_me()])
    [answer] = wait_until(lambda: texts_to(daemon, GROUP), timeout=20)
    assert answer == "echo: what is up"
    bot_ts = daemon.messages_to(GROUP)[0]["timestamp"]
    quote = {"id": bot_ts, "author": daemon.account, "authorNumber": daemon.account, "text": answer}
    daemon.send_text(ALICE, "and then?", group=GROUP, quote=quote)
    wait_until(lambda: len(texts_to(daemon, GROUP)) == 2, timeout=20)
    assert texts_to(daemon, GROUP)[1] == "echo: and then?"
    # neither the unaddressed message nor the stranger's mention reached the model
    assert len(llm.requests) == asked + 2
    assert texts_to(daemon, CAROL) == []  # no pairing code in a group either


def _a_command_and_a_long_answer(llm: FakeOpenAI, daemon: FakeSignalCli) -> None:
    asked, before = len(llm.requests), len(texts_to(daemon, ALICE))
    daemon.send_text(ALICE, "/status")
    wait_until(lambda: len(texts_to(daemon, ALICE)) == before + 1, timeout=20)
    assert len(llm.requests) == asked  # answered by the gateway itself
    paragraphs = [f"para{n} " + " ".join(f"w{n}x{j}" for j in range(300)) for n in range(4)]
    llm.push(text("\n\n".join(paragraphs)))
    daemon.send_text(ALICE, "a long one please")
    wait_until(lambda: "para3" in " ".join(texts_to(daemon, ALICE)), timeout=20)
    parts = texts_to(daemon, ALICE)[before + 1 :]
    assert len(parts) >= 3 and all(len(p) <= 2000 for p in parts)
    assert " ".join(" ".join(parts).split()) == " ".join(" ".join(paragraphs).split())


def _attachments_are_named_and_fetched_on_demand(llm: FakeOpenAI, daemon: FakeSignalCli) -> None:
    before = len(texts_to(daemon, ALICE))
    doc = daemon.add_attachment("att-doc-1", b"some notes\n", "text/plain", "notes.txt")
    daemon.send_text(ALICE, "see attached", attachments=[doc])
    wait_until(lambda: len(texts_to(daemon, ALICE)) == before + 1, timeout=20)
    assert "[attached file: notes.txt (text/plain, 11 bytes)]" in str(
        llm.requests[-1]["messages"][-1]
    )
    assert "getAttachment" not in daemon.calls  # named, not fetched: no tool asked for it
    photo = daemon.add_attachment("att-png-1", PNG, "image/png", "dot.png")
    daemon.send_text(ALICE, "", attachments=[photo])
    wait_until(lambda: len(texts_to(daemon, ALICE)) == before + 2, timeout=20)
    assert daemon.calls.count("getAttachment") == 1  # the vision model wanted it
    parts = llm.requests[-1]["messages"][-1]["content"]
    assert any("image_url" in p and p["image_url"]["url"].startswith("data:image/") for p in parts)


def _junk_on_the_stream_is_skipped(gateway: GatewayProcess, daemon: FakeSignalCli) -> None:
    before = len(texts_to(daemon, ALICE))
    for junk in (
        "not json",
        '{"envelope": 5}',
        '{"envelope": {"dataMessage": {"message": 3}}}',
        '{"envelope": {"source": "+1", "timestamp": "x", "dataMessage": {}}}',
        "[1, 2",
    ):
        daemon.push_raw(junk)
    daemon.send_text(ALICE, "still there?")
    wait_until(lambda: len(texts_to(daemon, ALICE)) == before + 1, timeout=20)
    assert texts_to(daemon, ALICE)[-1] == "echo: still there?"
    assert ready(gateway)
    assert any(e["event"] == "signal.event_skipped" for e in gateway.log_events())


def test_signal_daemon_restarting_loses_nothing(
    tmp_path: Path, fake_llm: FakeOpenAI, daemon: FakeSignalCli
) -> None:
    gateway = signal_gateway(tmp_path / "home", fake_llm, daemon)
    try:
        gateway.start()
        wait_until(lambda: ready(gateway), timeout=20, explain=gateway.story)
        daemon.send_text(ALICE, "before")
        wait_until(lambda: texts_to(daemon, ALICE), timeout=20, explain=gateway.story)
        daemon.stop()
        wait_until(lambda: not ready(gateway), timeout=20, explain=gateway.story)
        detail = httpx.get(f"{gateway.url}/readyz", timeout=2).text
        assert "signal" in detail
        daemon.send_text(ALICE, "while down 1")  # waits on Signal's servers
        daemon.send_text(ALICE, "while down 2")
        daemon.restart()
        wait_until(lambda: ready(gateway), timeout=30, explain=gateway.story)
        # both answered (one turn when they arrive together, as they usually do), once
        wait_until(
            lambda: any("while down 2" in t for t in texts_to(daemon, ALICE)),
            timeout=20,
            explain=gateway.story,
        )
        gateway.signal(signal.SIGTERM)
        assert gateway.wait(20) == 0, gateway.stderr()
    finally:
        gateway.kill()
    replies = texts_to(daemon, ALICE)
    assert replies[0] == "echo: before" and len(replies) == len(set(replies)) <= 3
    asked = str([r["messages"] for r in fake_llm.requests])
    assert "while down 1" in asked and "while down 2" in asked


def test_doctor_checks_the_daemon_and_an_unknown_account_exits_78(
    tmp_path: Path, fake_llm: FakeOpenAI, daemon: FakeSignalCli
) -> None:
    gateway = signal_gateway(tmp_path / "home", fake_llm, daemon)
    doctor = hermes(gateway, "doctor", "--config", "CONFIG")
    assert f"valid: {daemon.account} on signal-cli 0.13.99-fake" in doctor.stdout, doctor.stdout
    daemon.registered = False
    doctor = hermes(gateway, "doctor", "--config", "CONFIG")
    line = next(ln for ln in doctor.stdout.splitlines() if ln.startswith("signal"))
    assert "FAIL" in line and "not registered or linked" in line, doctor.stdout
    try:
        gateway.start(wait=False)
        code = gateway.wait(30)
    finally:
        gateway.kill()
    assert code == 78, gateway.stderr()
    assert "platforms.signal.account" in gateway.stderr()
    daemon.stop()
    doctor = hermes(gateway, "doctor", "--config", "CONFIG")
    line = next(ln for ln in doctor.stdout.splitlines() if ln.startswith("signal"))
    assert "FAIL" in line and "unreachable" in line, doctor.stdout


def _a_file_goes_as_an_attachment_and_typing_shows_while_working(
    llm: FakeOpenAI, daemon: FakeSignalCli
) -> None:
    before = len(texts_to(daemon, ALICE))
    llm.push(
        tool_calls(("write_file", {"path": "report.txt", "content": "the report\n"})),
        tool_calls(("send_file", {"path": "report.txt", "caption": "your report"})),
        text("Here it is.", delay=1.0),  # long enough for the typing indicator
    )
    daemon.send_text(ALICE, "send me the report")
    wait_until(lambda: len(texts_to(daemon, ALICE)) == before + 2, timeout=30)
    answer, upload = daemon.messages_to(ALICE)[before:]
    assert answer["message"] == "Here it is."
    assert upload["message"] == "your report"
    [uri] = upload["attachments"]
    assert uri.startswith("data:") and ";filename=report.txt;" in uri
    assert base64.b64decode(uri.split("base64,", 1)[1]) == b"the report\n"
    assert daemon.typing and daemon.typing[-1]["recipient"] == [ALICE]
