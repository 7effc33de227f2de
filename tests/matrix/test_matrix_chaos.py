"""Matrix across crashes and outages, through `hermes gateway run` on a real Synapse behind a
relay: a SIGKILL right after Synapse took a reply part (before the gateway could record it)
does not double it, since the replay sends it with the same transaction id; a SIGKILL while
the model thinks loses nothing; a homeserver gone for a while is reconnected to."""

from __future__ import annotations

import signal
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.chaos.killing import killer
from tests.fakes.openai import FakeOpenAI, text, tool_calls
from tests.fakes.server import wait_until
from tests.matrix.kit import bodies, joined, matrix_gateway, ready
from tests.matrix_server import MatrixUser, Relay, Synapse

pytestmark = pytest.mark.e2e
# three messages: each paragraph fills most of one (8,000 units)
PARAGRAPHS = [f"part{n} " + " ".join(f"w{n}x{j}" for j in range(800)) for n in (1, 2, 3)]


@pytest.fixture
def relay(synapse: Synapse) -> Iterator[Relay]:
    server = Relay(synapse.url).start()
    try:
        yield server
    finally:
        server.stop()


def dm_with(alice: MatrixUser, bot: MatrixUser) -> str:
    room = alice.create_room(invite=[bot.user_id], direct=True)
    wait_until(lambda: joined(alice, room, bot), timeout=20)
    return room


def test_a_part_synapse_took_before_the_kill_is_not_posted_again(
    tmp_path: Path, fake_llm: FakeOpenAI, synapse: Synapse, relay: Relay
) -> None:
    bot, alice = synapse.register(), synapse.register()
    gw = matrix_gateway(tmp_path / "home", fake_llm, relay.url, bot, allowed_users=[alice.user_id])
    fake_llm.push(text("\n\n".join(PARAGRAPHS)))
    try:
        ready(gw)
        room = dm_with(alice, bot)
        relay.arm("part1", killer(gw))
        alice.say(room, "three parts please")
        wait_until(lambda: relay.fired and gw.proc is not None and gw.proc.poll() is not None, 30)
        ready(gw)
        wait_until(lambda: len(bodies(alice, room, bot)) >= 3, timeout=30)
        gw.signal(signal.SIGTERM)
        assert gw.wait(20) == 0
    finally:
        gw.kill()
    assert [b.split()[0] for b in bodies(alice, room, bot)] == ["part1", "part2", "part3"]
    # part1 was sent again after the restart, with its first transaction id: Synapse answered
    # with the event it had, and showed nothing new
    assert len(relay.sends) == 4 and relay.sends[0] == relay.sends[1]
    assert len(fake_llm.requests) == 1  # the answer was kept, not asked for again


@pytest.mark.slow  # ~16 s: the replay waits out the killed run's claim (the core's path)
def test_a_kill_while_the_model_thinks_loses_nothing_and_answers_once(
    tmp_path: Path, fake_llm: FakeOpenAI, synapse: Synapse
) -> None:
    bot, alice = synapse.register(), synapse.register()
    gw = matrix_gateway(
        tmp_path / "home", fake_llm, synapse.url, bot, allowed_users=[alice.user_id]
    )
    try:
        ready(gw)
        room = dm_with(alice, bot)
        fake_llm.delay = 30.0  # the first call hangs: the gateway dies with it in flight
        alice.say(room, "are you there")
        wait_until(lambda: len(fake_llm.requests) == 1, timeout=20)
        killer(gw)()
        fake_llm.delay = 0.0
        ready(gw)
        wait_until(lambda: bodies(alice, room, bot), timeout=30)
        gw.signal(signal.SIGTERM)
        assert gw.wait(20) == 0
    finally:
        gw.kill()
    assert bodies(alice, room, bot) == ["echo: are you there"]


def test_the_bot_reconnects_after_the_homeserver_was_gone(
    tmp_path: Path, fake_llm: FakeOpenAI, synapse: Synapse, relay: Relay
) -> None:
    bot, alice = synapse.register(), synapse.register()
    gw = matrix_gateway(tmp_path / "home", fake_llm, relay.url, bot, allowed_users=[alice.user_id])
    try:
        ready(gw)
        room = dm_with(alice, bot)
        relay.down = True
        # the long poll in flight ends within its 5 s; the next attempts are refused
        wait_until(lambda: httpx.get(f"{gw.url}/readyz", timeout=2).status_code == 503, 30)
        alice.say(room, "said while you were away")  # straight to Synapse
        relay.down = False
        wait_until(lambda: bodies(alice, room, bot), timeout=40)
        assert httpx.get(f"{gw.url}/readyz", timeout=2).status_code == 200
    finally:
        gw.kill()
    assert bodies(alice, room, bot) == ["echo: said while you were away"]


@pytest.mark.slow  # the text case above covers the same transaction id; ~15 s
def test_a_file_synapse_took_before_the_kill_is_shown_once(
    tmp_path: Path, fake_llm: FakeOpenAI, synapse: Synapse, relay: Relay
) -> None:
    bot, alice = synapse.register(), synapse.register()
    gw = matrix_gateway(
        tmp_path / "home",
        fake_llm,
        relay.url,
        bot,
        allowed_users=[alice.user_id],
        tools={"enabled": ["write_file", "send_file"]},
    )
    fake_llm.push(
        tool_calls(("write_file", {"path": "report.csv", "content": "a,b\n1,2\n"})),
        tool_calls(("send_file", {"path": "report.csv", "caption": "the numbers"})),
        text("Here it is."),
    )
    try:
        ready(gw)
        room = dm_with(alice, bot)
        relay.arm("the numbers", killer(gw))
        alice.say(room, "report please")
        wait_until(lambda: relay.fired and gw.proc is not None and gw.proc.poll() is not None, 30)
        ready(gw)
        wait_until(lambda: len(relay.sends) >= 3, timeout=30)  # the file part sent again
        gw.signal(signal.SIGTERM)
        assert gw.wait(20) == 0
    finally:
        gw.kill()
    assert bodies(alice, room, bot) == ["Here it is.", "the numbers"]
    assert relay.sends[1] == relay.sends[2]
