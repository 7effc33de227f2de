"""`hermes gateway run` on Mattermost against `FakeMattermost`: DMs, mentions and threads, pairing,
`/status` at once, long answers split, the live preview, files fetched on demand, a dropped
socket caught up by REST, malformed events skipped, the doctor, and a refused token (exit 78)."""

from __future__ import annotations

import base64
import json
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.chaos.test_exactly_once import SCHEDULER, add_job
from tests.e2e.daemon import GatewayProcess
from tests.fakes.mattermost import ALICE, BOT_ID, STRANGER, TOKEN, TOWN, FakeMattermost
from tests.fakes.openai import FakeOpenAI, text, tool_calls
from tests.fakes.server import wait_until
from tests.integration.test_tools_gateway import PNG
from tests.security import keys

pytestmark = pytest.mark.e2e


@pytest.fixture
def mm() -> Iterator[FakeMattermost]:
    with FakeMattermost() as fake:
        yield fake


def mm_gateway(
    home: Path,
    llm: FakeOpenAI,
    mm: FakeMattermost,
    token: str = TOKEN,
    extra: dict[str, Any] | None = None,
    **section: Any,
) -> GatewayProcess:
    platform = {
        "enabled": True,
        "url": mm.url,
        "allowed_users": [ALICE],
        "ping_interval_s": 1,
        **section,
    }
    config: dict[str, Any] = {
        "model": {"base_url": llm.base_url, "api_key": "sk-fake", "max_retries": 0},
        "platforms": {"mattermost": platform},
        **(extra or {}),
    }
    # the token comes from the environment, as in a systemd unit's EnvironmentFile
    return GatewayProcess(home, config, env={"MATTERMOST_TOKEN": token})


def start(gw: GatewayProcess) -> None:
    gw.start(wait=False)
    gw.wait_healthy(60)
    wait_until(lambda: httpx.get(f"{gw.url}/readyz", timeout=2).status_code == 200, timeout=30)


def stop(gw: GatewayProcess) -> None:
    gw.signal(signal.SIGTERM)
    assert gw.wait(20) == 0, gw.stderr()


def texts(mm: FakeMattermost, channel: str) -> list[str]:
    return [p["message"] for p in mm.bot_posts(channel)]


def hermes(gw: GatewayProcess, *args: str) -> subprocess.CompletedProcess[str]:
    config = ["--config", str(gw.config_path)]
    command = [sys.executable, "-m", "hermes_gateway", args[0], *config, *args[1:]]
    return subprocess.run(command, env=gw.env, capture_output=True, text=True, timeout=60)


def test_dms_channels_threads_pairing_and_commands_through_the_daemon(
    tmp_path: Path, fake_llm: FakeOpenAI, mm: FakeMattermost
) -> None:
    gw = mm_gateway(tmp_path / "home", fake_llm, mm, pairing=True, message_limit=300)
    try:
        start(gw)
        mm.post_as(ALICE, mm.dm_alice, "hello daemon")
        assert wait_until(lambda: texts(mm, mm.dm_alice), timeout=20) == ["echo: hello daemon"]
        assert mm.bot_posts(mm.dm_alice)[0]["root_id"] == ""  # a DM is answered in the DM

        # a channel: only a mention is answered, in a thread under it; a reply in that thread
        # needs no mention (the bot is in it); a post that names nobody is left alone
        mm.post_as(ALICE, TOWN, "just chatting")
        root = mm.post_as(ALICE, TOWN, "@hermes what is up?")
        wait_until(lambda: texts(mm, TOWN), timeout=20)
        mm.post_as(ALICE, TOWN, "and then?", root_id=root["id"])
        wait_until(lambda: len(texts(mm, TOWN)) == 2, timeout=20)
        assert texts(mm, TOWN) == ["echo: what is up?", "echo: and then?"]
        assert {p["root_id"] for p in mm.bot_posts(TOWN)} == {root["id"]}
        assert len(fake_llm.requests) == 3
        # one session per thread: the reply's run saw the thread's first exchange
        assert "what is up?" in json.dumps(fake_llm.requests[2]["messages"])

        # a stranger gets a pairing code and no model call; approved, they are answered
        mm.post_as(STRANGER, mm.dm_stranger, "let me in")
        [code_reply] = wait_until(lambda: texts(mm, mm.dm_stranger), timeout=20)
        assert "hermes pairing approve mattermost " in code_reply
        assert len(fake_llm.requests) == 3
        code = code_reply.split("hermes pairing approve mattermost ")[1].split()[0]
        approved = hermes(gw, "pairing", "approve", "mattermost", code)
        assert approved.returncode == 0, approved.stderr
        wait_until(lambda: len(texts(mm, mm.dm_stranger)) == 2, timeout=20)  # the welcome
        mm.post_as(STRANGER, mm.dm_stranger, "now?")
        wait_until(lambda: len(texts(mm, mm.dm_stranger)) == 3, timeout=20)
        assert texts(mm, mm.dm_stranger)[2] == "echo: now?"

        # /status is answered while a run is busy; a long answer is split at the limit
        asked = len(fake_llm.requests)
        words = " ".join(f"word{n}" for n in range(150))
        fake_llm.push(text(words, delay=3.0))
        mm.post_as(ALICE, mm.dm_alice, "a long one please")
        wait_until(lambda: mm.typing, timeout=20)
        mm.post_as(ALICE, mm.dm_alice, " /status")
        wait_until(lambda: len(texts(mm, mm.dm_alice)) == 2, timeout=20)
        assert len(fake_llm.requests) == asked + 1  # the status did not wait for the model
        wait_until(lambda: texts(mm, mm.dm_alice)[-1].endswith("word149"), timeout=20)
        long_parts = texts(mm, mm.dm_alice)[2:]
        assert all(len(p) <= 300 for p in long_parts) and len(long_parts) >= 3
        assert " ".join(long_parts).split() == words.split()
        stop(gw)
    finally:
        gw.kill()
    assert mm.typing[0] == {"channel_id": mm.dm_alice, "parent_id": ""}
    log = (tmp_path / "home" / "logs" / "gateway.log").read_text()
    assert TOKEN not in log and "mattermost.connected" in log


def test_a_dropped_socket_is_caught_up_and_each_post_answered_once(
    tmp_path: Path, fake_llm: FakeOpenAI, mm: FakeMattermost
) -> None:
    gw = mm_gateway(tmp_path / "home", fake_llm, mm)
    try:
        start(gw)
        mm.post_as(ALICE, mm.dm_alice, "before")
        wait_until(lambda: texts(mm, mm.dm_alice), timeout=20)
        # the server goes away: the socket closes, new ones are refused, posts arrive meanwhile
        mm.refuse_sockets = True
        mm.drop_sockets()
        wait_until(lambda: mm.live_sockets == 0 and mm.refused, timeout=10)
        mm.post_as(ALICE, mm.dm_alice, "while down 1")
        root = mm.post_as(ALICE, TOWN, "@hermes while down 2")
        connected = mm.socket_count
        mm.refuse_sockets = False
        wait_until(lambda: mm.socket_count > connected, timeout=30)
        wait_until(
            lambda: len(texts(mm, mm.dm_alice)) == 2 and texts(mm, TOWN), 20, explain=gw.story
        )
        # garbage frames are skipped; an event lost on the way (a seq gap) is fetched by REST
        mm.send_raw("not json")
        mm.send_raw(json.dumps({"event": "posted", "data": {"post": "{broken"}}))
        mm.send_raw(json.dumps({"event": "posted", "data": {"post": "[]"}}))
        mm.skip_next_events = 1
        mm.post_as(ALICE, mm.dm_alice, "lost on the way")
        mm.post_as(ALICE, TOWN, "@hermes after the gap")
        wait_until(lambda: len(texts(mm, mm.dm_alice)) == 3, 20, explain=gw.story)
        wait_until(lambda: len(texts(mm, TOWN)) == 2, 20, explain=gw.story)
        stop(gw)
    finally:
        gw.kill()
    assert texts(mm, mm.dm_alice) == ["echo: before", "echo: while down 1", "echo: lost on the way"]
    assert texts(mm, TOWN) == ["echo: while down 2", "echo: after the gap"]
    assert mm.bot_posts(TOWN)[0]["root_id"] == root["id"]
    assert mm.requests_to("GET", f"/api/v4/channels/{mm.dm_alice}/posts?since=")
    events = [e["event"] for e in gw.log_events()]
    assert "mattermost.events_missed" in events and "mattermost.frame_unreadable" in events
    assert "mattermost.post_unreadable" in events


def test_the_live_preview_is_edited_into_the_answer(
    tmp_path: Path, fake_llm: FakeOpenAI, mm: FakeMattermost
) -> None:
    gw = mm_gateway(tmp_path / "home", fake_llm, mm, streaming=True)
    answer = " ".join(f"w{n}" for n in range(60))
    fake_llm.push(text(answer, chunk_size=40, chunk_delay=0.3))
    try:
        start(gw)
        mm.post_as(ALICE, mm.dm_alice, "stream it")
        wait_until(lambda: texts(mm, mm.dm_alice) == [answer], timeout=30)
        stop(gw)
    finally:
        gw.kill()
    [post] = mm.bot_posts(mm.dm_alice)  # one post: the preview, edited into the answer
    assert post["edit_at"] > 0
    assert mm.requests_to("PUT", f"/api/v4/posts/{post['id']}/patch")


def test_files_are_named_to_the_model_and_fetched_on_demand_within_the_cap(
    tmp_path: Path, fake_llm: FakeOpenAI, mm: FakeMattermost
) -> None:
    vision = {"tools": {"enabled": ["vision_analyze"], "vision": {"model": "vision-model"}}}
    gw = mm_gateway(tmp_path / "home", fake_llm, mm, extra=vision, media_max_bytes=1000)
    dot = mm.add_file("dot.png", PNG, "image/png")
    big = mm.add_file("big.png", PNG + bytes(2000), "image/png")
    fake_llm.push(
        tool_calls(("vision_analyze", {"attachment": 1, "question": "What colour?"})),
        text("A single red pixel."),
        text("Your picture is one red dot."),
        tool_calls(("vision_analyze", {"attachment": 1})),
        text("That one is too big."),
    )
    try:
        start(gw)
        mm.post_as(ALICE, mm.dm_alice, "what is this?", file_ids=(dot,))
        wait_until(lambda: texts(mm, mm.dm_alice), timeout=30, explain=gw.story)
        assert mm.downloads == [dot]  # fetched when the tool asked, not at intake
        mm.post_as(ALICE, mm.dm_alice, "and this?", file_ids=(big,))
        wait_until(lambda: len(texts(mm, mm.dm_alice)) == 2, timeout=30, explain=gw.story)
        stop(gw)
    finally:
        gw.kill()
    assert texts(mm, mm.dm_alice) == ["Your picture is one red dot.", "That one is too big."]
    first = fake_llm.requests[0]["messages"][-1]["content"]
    assert first == "what is this?\n[attached file: dot.png (image/png)]"
    parts = fake_llm.requests[1]["messages"][0]["content"]
    assert parts[1]["image_url"]["url"] == "data:image/png;base64," + base64.b64encode(PNG).decode()
    refused = [m["content"] for m in fake_llm.requests[4]["messages"] if m["role"] == "tool"]
    assert refused[-1:] == [
        f"Error: the attachment could not be fetched: big.png is {len(PNG) + 2000} bytes"
        " (the cap is 1000)"
    ]
    assert mm.downloads == [dot]  # the big one was refused by its size, before any download
    assert mm.requests_to("GET", f"/api/v4/files/{dot}/info")  # its name and size asked first


def test_the_doctor_checks_the_token_for_real(
    tmp_path: Path, fake_llm: FakeOpenAI, mm: FakeMattermost
) -> None:
    def row(token: str) -> str:
        gw = mm_gateway(tmp_path / token, fake_llm, mm, token=token)
        out = hermes(gw, "doctor").stdout
        return next(line for line in out.splitlines() if line.startswith("mattermost"))

    assert "token valid: @hermes" in row(TOKEN)
    refused = row("wrongtoken0000000000000000")
    assert "FAIL" in refused and "token rejected (HTTP 401: Invalid or expired session" in refused
    assert len(mm.requests_to("GET", "/api/v4/users/me")) == 2


def test_a_scheduled_answer_reaches_a_user_by_id_in_their_direct_channel(
    tmp_path: Path, fake_llm: FakeOpenAI, mm: FakeMattermost
) -> None:
    extra = {"scheduler": SCHEDULER, "control": {"token": keys.CONTROL_TOKEN}}
    gw = mm_gateway(tmp_path / "home", fake_llm, mm, extra=extra)
    try:
        start(gw)
        add_job(gw, f"mattermost:@{ALICE}")
        wait_until(lambda: texts(mm, mm.dm_alice), timeout=30, explain=gw.story)
        stop(gw)
    finally:
        gw.kill()
    [answer] = texts(mm, mm.dm_alice)
    assert answer.startswith("echo: [Scheduled job") and "Report the backup status." in answer
    [opened] = mm.requests_to("POST", "/api/v4/channels/direct")
    assert sorted(opened[2]) == sorted([BOT_ID, ALICE])


def test_a_refused_token_exits_78_naming_the_cause(
    tmp_path: Path, fake_llm: FakeOpenAI, mm: FakeMattermost
) -> None:
    gw = mm_gateway(tmp_path / "home", fake_llm, mm, token="wrongtoken0000000000000000")
    try:
        gw.start(wait=False)
        assert gw.wait(30) == 78  # a configuration error: systemd must not restart it
    finally:
        gw.kill()
    assert "Invalid or expired session" in gw.stderr()
    assert [c[1] for c in mm.calls] == ["/api/v4/users/me"]  # nothing else was asked
