"""Mattermost across a SIGKILL of `hermes gateway run`: a part (or a file's post) the server took
before it was recorded is found by its key in props, not posted again; a message in flight is
answered once; posts made while the gateway was down are caught up from its durable cursor."""

from __future__ import annotations

import contextlib
import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.chaos.killing import Armed, killer
from tests.chaos.test_exactly_once import model, start, stop
from tests.e2e.daemon import GatewayProcess
from tests.fakes.mattermost import ALICE, TOKEN, FakeMattermost
from tests.fakes.openai import FakeOpenAI, text, tool_calls
from tests.fakes.server import wait_until

pytestmark = [pytest.mark.e2e]


@pytest.fixture
def mm() -> Iterator[FakeMattermost]:
    with FakeMattermost() as fake:
        yield fake


def gateway(
    home: Path,
    llm: FakeOpenAI,
    mm: FakeMattermost,
    tools: list[str] | None = None,
    **section: object,
) -> GatewayProcess:
    platform = {"enabled": True, "url": mm.url, "allowed_users": [ALICE], **section}
    config = {"model": model(llm), "platforms": {"mattermost": platform}}
    if tools:
        config["tools"] = {"enabled": tools}
    return GatewayProcess(home, config, env={"MATTERMOST_TOKEN": TOKEN})


def inbox_rows(home: Path) -> int:
    with contextlib.closing(sqlite3.connect(home / "state.db")) as db:
        query = "SELECT count(*) FROM inbox WHERE platform = 'mattermost'"
        return int(db.execute(query).fetchone()[0])


def texts(mm: FakeMattermost, channel: str) -> list[str]:
    return [p["message"] for p in mm.bot_posts(channel)]


def test_a_part_taken_before_the_kill_is_found_by_its_key_and_not_posted_again(
    tmp_path: Path, llm: FakeOpenAI, mm: FakeMattermost
) -> None:
    mm.dedupe_window_s = 0  # only the gateway's own look-up stands between it and a double
    gw = gateway(tmp_path / "home", llm, mm, message_limit=2000)
    paragraphs = [f"part{n} " + " ".join(f"w{n}x{j}" for j in range(280)) for n in (1, 2, 3)]
    llm.push(text("\n\n".join(paragraphs)))  # three posts of up to 2000 characters
    trigger = Armed()
    trigger.arm("part2", killer(gw))
    mm.after_bot_post = lambda post: trigger.check(post["message"])
    try:
        start(gw)
        mm.post_as(ALICE, mm.dm_alice, "three parts")
        wait_until(lambda: trigger.fired and gw.proc is not None and gw.proc.poll() is not None, 30)
        assert [t.split()[0] for t in texts(mm, mm.dm_alice)] == ["part1", "part2"]
        start(gw)
        wait_until(lambda: len(texts(mm, mm.dm_alice)) >= 3, timeout=30, explain=gw.story)
        stop(gw)
    finally:
        gw.kill()
    assert [t.split()[0] for t in texts(mm, mm.dm_alice)] == ["part1", "part2", "part3"]
    assert len(llm.requests) == 1  # the answer was delivered again, not computed again
    lookups = mm.requests_to("GET", f"/api/v4/channels/{mm.dm_alice}/posts?since=")
    assert lookups, "the part in doubt was not looked up"
    keys = [p["props"].get("hermes_key") for p in mm.bot_posts(mm.dm_alice)]
    assert all(keys) and len(set(keys)) == 3
    assert [p["pending_post_id"] for p in mm.bot_posts(mm.dm_alice)] == keys


def test_a_message_in_flight_at_the_kill_is_answered_once_after_the_restart(
    tmp_path: Path, llm: FakeOpenAI, mm: FakeMattermost
) -> None:
    gw = gateway(tmp_path / "home", llm, mm)
    llm.push(text("too late", delay=30))  # the first run is still waiting for its model
    try:
        start(gw)
        mm.post_as(ALICE, mm.dm_alice, "in flight")
        wait_until(lambda: len(llm.requests) == 1, timeout=20)
        killer(gw)()
        start(gw)
        wait_until(lambda: texts(mm, mm.dm_alice), timeout=30, explain=gw.story)
        time.sleep(1.0)  # a second answer would come right after the first
        stop(gw)
    finally:
        gw.kill()
    assert texts(mm, mm.dm_alice) == ["echo: in flight"]
    assert len(llm.requests) == 2
    # the restart's catch-up read the post again: the inbox knew it by its id
    assert inbox_rows(tmp_path / "home") == 1


@pytest.mark.slow  # a third restart: the reconnect's catch-up is in the default suite (e2e)
def test_posts_made_while_the_gateway_was_down_are_caught_up_and_answered_once(
    tmp_path: Path, llm: FakeOpenAI, mm: FakeMattermost
) -> None:
    gw = gateway(tmp_path / "home", llm, mm)
    try:
        start(gw)
        mm.post_as(ALICE, mm.dm_alice, "first")
        wait_until(lambda: texts(mm, mm.dm_alice), timeout=20)
        cursors = tmp_path / "home" / "mattermost" / "cursors.json"
        # the cursor is written within a second of the post
        wait_until(lambda: cursors.exists() and mm.dm_alice in cursors.read_text(), timeout=10)
        killer(gw)()
        mm.post_as(ALICE, mm.dm_alice, "while you were out")
        start(gw)
        wait_until(lambda: len(texts(mm, mm.dm_alice)) >= 2, timeout=30, explain=gw.story)
        time.sleep(1.0)
        stop(gw)
    finally:
        gw.kill()
    assert texts(mm, mm.dm_alice) == ["echo: first", "echo: while you were out"]
    assert len(llm.requests) == 2


CSV = "a,b\n1,2\n"


def shown(mm: FakeMattermost) -> list[tuple[str, list[str]]]:
    return [
        (p["message"], [f["name"] for f in p["metadata"]["files"]])
        for p in mm.bot_posts(mm.dm_alice)
    ]


@pytest.mark.parametrize("cut", [None, pytest.param("the numbers", marks=pytest.mark.slow)])
def test_a_file_the_agent_sends_is_posted_after_the_text_once(
    tmp_path: Path, llm: FakeOpenAI, mm: FakeMattermost, cut: str | None
) -> None:
    """``cut``: SIGKILL right after the server took the file's post, before it was recorded."""
    mm.dedupe_window_s = 0
    gw = gateway(tmp_path / "home", llm, mm, tools=["write_file", "send_file"])
    llm.push(
        tool_calls(("write_file", {"path": "report.csv", "content": CSV})),
        tool_calls(("send_file", {"path": "report.csv", "caption": "the numbers"})),
        text("Here is the report."),
    )
    trigger = Armed()
    if cut is not None:
        trigger.arm(cut, killer(gw))
    mm.after_bot_post = lambda post: trigger.check(post["message"])
    try:
        start(gw)
        mm.post_as(ALICE, mm.dm_alice, "report please")
        if cut is not None:
            wait_until(lambda: trigger.fired and gw.proc is not None and gw.proc.poll() is not None)
            start(gw)
        wait_until(lambda: len(mm.bot_posts(mm.dm_alice)) >= 2, timeout=30, explain=gw.story)
        time.sleep(0.5)
        stop(gw)
    finally:
        gw.kill()
    assert shown(mm) == [("Here is the report.", []), ("the numbers", ["report.csv"])]
    assert [(u["name"], u["data"]) for u in mm.uploads] == [("report.csv", CSV.encode())]
    assert len(llm.requests) == 3
