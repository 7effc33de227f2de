"""`hermes gateway run` as a real process on a real Synapse: a DM answered in Matrix HTML, a
command at once, a long answer split, an image fetched on demand, a stranger paired; rooms
answered only when the bot is mentioned, replied to or in its thread; invites from strangers
declined; an encrypted room told once; messages sent while the gateway was down answered once;
the live preview edited into the answer; doctor's whoami."""

from __future__ import annotations

import base64
import json
import signal
import uuid
from pathlib import Path

import httpx
import pytest

from adapters.matrix.state import SyncState
from tests.e2e.daemon import GatewayProcess
from tests.fakes.openai import FakeOpenAI, text, tool_calls
from tests.fakes.server import wait_until
from tests.integration.test_tools_gateway import PNG
from tests.matrix.kit import bodies, bot_messages, hermes, joined, matrix_gateway, ready
from tests.matrix_server import MatrixUser, Synapse, shown_text

pytestmark = pytest.mark.e2e
# contents a homeserver passes on that are not what a client sends (Synapse checks few fields)
ODD: list[dict[str, object]] = [
    {"msgtype": "m.unknown", "body": "odd"},
    {"msgtype": "m.image", "body": "odd", "url": 7, "info": "no"},
    {"msgtype": "m.file", "body": "odd", "url": "mxc://x", "info": {"size": "big"}},
    {"msgtype": "m.text", "body": "odd", "format": 3, "formatted_body": []},
    {"msgtype": "m.text", "body": "odd", "m.relates_to": {"m.in_reply_to": "nope"}},
]
TOOLS = {
    "enabled": ["vision_analyze", "write_file", "send_file"],
    "vision": {"model": "vision-model"},
}
CSV = "city,people\nOslo,700000\n"


def test_a_dm_is_answered_in_html_and_a_stranger_is_paired(
    tmp_path: Path, fake_llm: FakeOpenAI, synapse: Synapse
) -> None:
    bot, alice = synapse.register(), synapse.register()
    home = tmp_path / "home"
    gateway = matrix_gateway(
        home, fake_llm, synapse.url, bot, allowed_users=[alice.user_id], pairing=True, tools=TOOLS
    )
    try:
        ready(gateway)
        dm = alice.create_room(invite=[bot.user_id], direct=True)
        wait_until(lambda: joined(alice, dm, bot), timeout=20)
        _chat_a_command_and_a_long_answer(fake_llm, alice, bot, dm)
        _a_stranger_is_paired_and_a_strangers_room_declined(gateway, fake_llm, synapse, bot)
        _files_in_and_out(home, fake_llm, alice, bot, dm)
        gateway.signal(signal.SIGTERM)
        assert gateway.wait(20) == 0
    finally:
        gateway.kill()
    log = (home / "logs" / "gateway.log").read_text()
    assert bot.token not in log and bot.token not in gateway.stderr()
    asked, vision = fake_llm.requests[-6], fake_llm.requests[-5]
    assert "[attached file: dot.png (image/png)]" in str(asked["messages"])
    parts = vision["messages"][0]["content"]
    assert parts[1]["image_url"]["url"] == "data:image/png;base64," + base64.b64encode(PNG).decode()
    media = [p.name for p in (home / "media").iterdir()]
    assert len(media) == 1 and media[0].endswith("dot.png")


def _chat_a_command_and_a_long_answer(
    llm: FakeOpenAI, alice: MatrixUser, bot: MatrixUser, dm: str
) -> None:
    asked = alice.say(dm, "hello **matrix**")
    [reply] = wait_until(lambda: bot_messages(alice, dm, bot), timeout=20)
    content = reply["content"]
    assert content["body"] == "echo: hello matrix"
    assert content["format"] == "org.matrix.custom.html"
    assert content["formatted_body"] == "<p>echo: hello <strong>matrix</strong></p>"
    assert content["m.relates_to"] == {"m.in_reply_to": {"event_id": asked}}

    alice.say(dm, "/status")  # answered by the gateway itself: no model call
    wait_until(lambda: len(bot_messages(alice, dm, bot)) == 2, timeout=20)
    assert len(llm.requests) == 1

    words = " ".join(f"w{n}" for n in range(2500))  # ~12,000 characters: two messages
    alice.say(dm, words)
    wait_until(lambda: len(bot_messages(alice, dm, bot)) == 4, timeout=30)
    parts = bot_messages(alice, dm, bot)[2:]
    assert all(len(p["content"]["formatted_body"]) <= 8000 for p in parts)
    assert " ".join(p["content"]["body"] for p in parts).split() == ["echo:", *words.split()]


def _a_stranger_is_paired_and_a_strangers_room_declined(
    gateway: GatewayProcess, llm: FakeOpenAI, synapse: Synapse, bot: MatrixUser
) -> None:
    """Its direct chat is joined (pairing is on), its message gets a code only; a stranger's
    invite to a room (not a direct chat) is declined."""
    bob = synapse.register()
    stranger = bob.create_room(invite=[bot.user_id], direct=True)
    wait_until(lambda: joined(bob, stranger, bot), timeout=20)
    asked_before = len(llm.requests)
    bob.say(stranger, "let me in")
    [code_reply] = wait_until(lambda: bodies(bob, stranger, bot), timeout=20)
    assert "hermes pairing approve matrix " in code_reply
    assert len(llm.requests) == asked_before
    code = code_reply.split("hermes pairing approve matrix ")[1].split()[0]
    approved = hermes(gateway, "pairing", "--config", "CONFIG", "approve", "matrix", code)
    assert approved.returncode == 0, approved.stderr
    wait_until(lambda: len(bodies(bob, stranger, bot)) == 2, timeout=20)  # "approved"
    bob.say(stranger, "now?")
    wait_until(lambda: len(bodies(bob, stranger, bot)) == 3, timeout=20)
    assert bodies(bob, stranger, bot)[2] == "echo: now?"

    carol = synapse.register()
    room = carol.create_room(invite=[bot.user_id])
    wait_until(lambda: _membership(carol, room, bot.user_id) == "leave", timeout=20)


def _files_in_and_out(
    home: Path, llm: FakeOpenAI, alice: MatrixUser, bot: MatrixUser, dm: str
) -> None:
    """An image is named to the model and fetched from the media API when a tool asks; a file
    the model sends goes to the media repository, after the answer's text."""
    assert not (home / "media").exists()
    llm.push(
        tool_calls(("vision_analyze", {"attachment": 1, "question": "What colour?"})),
        text("A single red pixel."),
        text("Your picture is one red dot."),
    )
    mxc = alice.upload(PNG, "dot.png", "image/png")
    info = {"mimetype": "image/png", "size": len(PNG)}
    alice.send(dm, {"msgtype": "m.image", "body": "dot.png", "url": mxc, "info": info})
    wait_until(lambda: len(bot_messages(alice, dm, bot)) == 5, timeout=30)
    assert bodies(alice, dm, bot)[4] == "Your picture is one red dot."

    llm.push(
        tool_calls(("write_file", {"path": "report.csv", "content": CSV})),
        tool_calls(("send_file", {"path": "report.csv", "caption": "the numbers"})),
        text("Here it is."),
    )
    alice.say(dm, "report please")
    wait_until(lambda: len(bot_messages(alice, dm, bot)) == 7, timeout=30)
    answer, shared = (m["content"] for m in bot_messages(alice, dm, bot)[5:])
    assert answer["body"] == "Here it is."
    shown = (shared["msgtype"], shared["body"], shared["filename"])
    assert shown == ("m.file", "the numbers", "report.csv")
    assert alice.download(shared["url"]) == CSV.encode()


def _membership(user: MatrixUser, room: str, who: str) -> str:
    try:
        state = user.call("GET", f"/rooms/{room}/state/m.room.member/{who}")
    except httpx.HTTPStatusError:
        return ""
    return str(state.get("membership", ""))


def test_in_a_room_the_bot_answers_mentions_replies_and_its_threads(
    tmp_path: Path, fake_llm: FakeOpenAI, synapse: Synapse
) -> None:
    bot, alice, carol = synapse.register(), synapse.register(), synapse.register()
    gateway = matrix_gateway(
        tmp_path / "home", fake_llm, synapse.url, bot, allowed_users=[alice.user_id, carol.user_id]
    )
    try:
        ready(gateway)
        room = alice.create_room(invite=[bot.user_id, carol.user_id])
        carol.join(room)
        wait_until(lambda: joined(alice, room, bot), timeout=20)
        alice.say(room, "talking to carol, not the bot")
        mention = alice.say(
            room, f"{bot.user_id}: hi there", **{"m.mentions": {"user_ids": [bot.user_id]}}
        )
        [first] = wait_until(lambda: bot_messages(alice, room, bot), timeout=20)
        assert first["content"]["body"] == "echo: hi there"
        assert first["content"]["m.relates_to"] == {"m.in_reply_to": {"event_id": mention}}
        assert len(fake_llm.requests) == 1  # the first message was not for the bot

        reply = {"m.relates_to": {"m.in_reply_to": {"event_id": first["event_id"]}}}
        alice.say(room, "and a reply", **reply)
        wait_until(lambda: len(bot_messages(alice, room, bot)) == 2, timeout=20)
        assert bot_messages(alice, room, bot)[1]["content"]["body"] == "echo: and a reply"

        _threads(alice, carol, bot, room)
        _odd_contents_and_encrypted_ones(alice, bot, room)
    finally:
        gateway.kill()
    # kept in the home, so a restart a day later (past Synapse's transaction ids) is quiet too
    [kept] = (tmp_path / "home" / "matrix").glob("sync-*.json")
    assert json.loads(kept.read_text())["told_encrypted"] == [room]


def _threads(alice: MatrixUser, carol: MatrixUser, bot: MatrixUser, room: str) -> None:
    """A thread where the bot is mentioned is answered in the thread, and from then on without
    a mention."""
    root = carol.say(room, "a thread starts here")
    in_thread = {"m.relates_to": {"rel_type": "m.thread", "event_id": root}}
    carol.say(room, f"{bot.user_id} join us", **in_thread)
    wait_until(lambda: len(bot_messages(alice, room, bot)) == 3, timeout=20)
    carol.say(room, "still here?", **in_thread)  # no mention: the bot is in this thread
    wait_until(lambda: len(bot_messages(alice, room, bot)) == 4, timeout=20)
    threaded = bot_messages(alice, room, bot)[2:]
    assert [m["content"]["body"] for m in threaded] == ["echo: join us", "echo: still here?"]
    for message in threaded:
        relation = message["content"]["m.relates_to"]
        assert (relation["rel_type"], relation["event_id"]) == ("m.thread", root)


def _odd_contents_and_encrypted_ones(alice: MatrixUser, bot: MatrixUser, room: str) -> None:
    """Odd contents are skipped and the next message is answered; encrypted messages get one
    notice for the room, not one per message."""
    for odd in ODD:
        alice.send(room, odd)  # read, and not for the bot
    alice.say(room, f"{bot.user_id} last")
    wait_until(lambda: len(bot_messages(alice, room, bot)) == 5, timeout=20)
    assert bot_messages(alice, room, bot)[4]["content"]["body"] == "echo: last"

    sealed = {"algorithm": "m.megolm.v1.aes-sha2", "ciphertext": "AwgA", "session_id": "s"}
    alice.send(room, sealed, kind="m.room.encrypted")
    alice.send(room, sealed, kind="m.room.encrypted")
    alice.say(room, f"{bot.user_id} plain again")
    wait_until(lambda: len(bot_messages(alice, room, bot)) == 7, timeout=20)
    said = bodies(alice, room, bot)[5:]
    assert said[1] == "echo: plain again"
    assert said[0].startswith("I can't read end-to-end encrypted messages")


def test_messages_sent_while_the_gateway_was_stopped_are_answered_once(
    tmp_path: Path, fake_llm: FakeOpenAI, synapse: Synapse
) -> None:
    """Each in a chat of its own (one chat's burst would be one merged turn). The first start
    finds a token the homeserver refuses (its database replaced): it starts afresh."""
    bot, alice = synapse.register(), synapse.register()
    gateway = matrix_gateway(
        tmp_path / "home", fake_llm, synapse.url, bot, allowed_users=[alice.user_id]
    )
    kept = SyncState(tmp_path / "home", synapse.url, bot.user_id).path
    kept.parent.mkdir(parents=True)
    kept.write_text(json.dumps({"since": "not-a-token", "told_encrypted": []}))
    try:
        ready(gateway)
        dms = [alice.create_room(invite=[bot.user_id], direct=True) for _ in range(3)]
        wait_until(lambda: all(joined(alice, dm, bot) for dm in dms), timeout=20)
        alice.say(dms[0], "before")
        wait_until(lambda: bodies(alice, dms[0], bot) == ["echo: before"], timeout=20)
        gateway.signal(signal.SIGTERM)
        assert gateway.wait(20) == 0
        missed = [f"while down {uuid.uuid4().hex[:6]}" for _ in dms]
        for dm, line in zip(dms, missed, strict=True):
            alice.say(dm, line)
        ready(gateway)
        wait_until(lambda: len(fake_llm.requests) == 4, timeout=30)
        wait_until(lambda: all(len(bodies(alice, dm, bot)) >= 1 for dm in dms[1:]), timeout=20)
        gateway.signal(signal.SIGTERM)
        assert gateway.wait(20) == 0
    finally:
        gateway.kill()
    assert "matrix.since_refused" in [e["event"] for e in gateway.log_events()]
    assert bodies(alice, dms[0], bot) == ["echo: before", f"echo: {missed[0]}"]
    for dm, line in zip(dms[1:], missed[1:], strict=True):
        assert bodies(alice, dm, bot) == [f"echo: {line}"]
    assert len(fake_llm.requests) == 4


def test_doctor_checks_the_access_token_with_whoami_and_a_rejected_one_exits_78(
    tmp_path: Path, fake_llm: FakeOpenAI, synapse: Synapse
) -> None:
    bot = synapse.register()
    gateway = matrix_gateway(tmp_path / "home", fake_llm, synapse.url, bot)
    doctor = hermes(gateway, "doctor", "--config", "CONFIG")
    assert f"token valid: {bot.user_id}" in doctor.stdout, doctor.stdout
    gateway.env["MATRIX_ACCESS_TOKEN"] = "syt_revoked_" + "x" * 20
    doctor = hermes(gateway, "doctor", "--config", "CONFIG")
    assert "token rejected (HTTP 401: Invalid access token passed.)" in doctor.stdout, doctor.stdout
    assert doctor.returncode != 0
    try:  # a rejected token is a configuration error: systemd must not restart the gateway
        gateway.start(wait=False)
        assert gateway.wait(30) == 78
    finally:
        gateway.kill()
    assert "platforms.matrix.access_token" in gateway.stderr()


def test_the_live_preview_is_edited_into_the_answer_while_the_bot_is_typing(
    tmp_path: Path, fake_llm: FakeOpenAI, synapse: Synapse
) -> None:
    bot, alice = synapse.register(), synapse.register()
    gateway = matrix_gateway(
        tmp_path / "home",
        fake_llm,
        synapse.url,
        bot,
        allowed_users=[alice.user_id],
        streaming=True,
    )
    answer = " ".join(f"word{n}" for n in range(40))
    fake_llm.push(text(answer, chunk_size=20, chunk_delay=0.15))
    try:
        ready(gateway)
        dm = alice.create_room(invite=[bot.user_id], direct=True)
        wait_until(lambda: joined(alice, dm, bot), timeout=20)
        alice.say(dm, "stream it")
        wait_until(lambda: bot.user_id in alice.typing(dm), timeout=20)  # while it works
        wait_until(lambda: _shown(alice, dm, bot) == [answer], timeout=30)
    finally:
        gateway.kill()
    edits = [
        m
        for m in alice.messages(dm)
        if m["sender"] == bot.user_id and "m.new_content" in m["content"]
    ]
    assert len(edits) >= 2  # the preview grew, then became the answer
    final = edits[-1]["content"]
    assert final["m.new_content"]["formatted_body"] == f"<p>{answer}</p>"
    assert final["m.relates_to"]["rel_type"] == "m.replace"


def _shown(user: MatrixUser, room: str, bot: MatrixUser) -> list[str]:
    return [shown_text(user, room, m) for m in bot_messages(user, room, bot)]
