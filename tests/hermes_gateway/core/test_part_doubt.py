"""A part in doubt: the idempotency key of a part, the intent the store keeps before a part goes
out, and how the replay reads it back (the part whose send a crash cut short)."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from hermes_gateway.events import MessageEvent, OutboundMessage
from hermes_gateway.platforms.parts import part_key
from hermes_gateway.store.sqlite import SqliteFastPath
from hermes_gateway.store.store import Store
from tests.fakes.discord import FakeDiscord
from tests.fakes.slack import FakeSlack
from tests.fakes.telegram import FakeTelegram


def event(message_id: str = "7") -> MessageEvent:
    return MessageEvent.create(
        platform="telegram",
        chat_type="dm",
        chat_id="1001",
        user_id="1001",
        message_id=message_id,
        text="hello",
    )


def test_a_part_key_is_stable_short_and_tells_parts_apart() -> None:
    out = OutboundMessage.to(event(), "a\n\nb", run_id="abc123")
    key = part_key(out, 0, "a")
    assert key == part_key(out, 0, "a") and key is not None and len(key) <= 25
    others = {part_key(out, 1, "a"), part_key(out, 0, "b")}
    others.add(part_key(OutboundMessage.to(event(), "a", run_id="other"), 0, "a"))
    assert key not in others and len(others) == 3
    nothing = OutboundMessage.to(event(), "a", answers=())
    assert part_key(nothing, 0, "a") is None


@pytest.mark.parametrize("fast", [True, False], ids=["sqlite-fast-path", "engine"])
async def test_the_replay_sees_the_part_whose_send_began_as_in_doubt(
    tmp_path: Path, fast: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    if not fast:  # the statements PostgreSQL runs, on SQLite
        monkeypatch.setattr(SqliteFastPath, "usable", staticmethod(lambda _conn: False))
    store = Store(f"sqlite+aiosqlite:///{tmp_path / 'state.db'}")
    await store.open()
    try:
        ids = [i for ev in (event("7"), event("8")) if (i := await store.accept(ev)) is not None]
        await store.complete_turn("k", [], ids[:1], "a\n\nb", "run1")
        await store.complete_turn("k", [], ids[1:], "c", "run2")
        [one, two] = (await store.replayable(3600))[1]
        assert (one.parts_sent, one.doubt, two.doubt) == (0, None, None)  # no send began

        await store.intent(ids[:1], 0, "7")
        await store.intent(ids[1:], 0, "")
        [one, two] = (await store.replayable(3600))[1]
        assert (one.parts_sent, one.doubt, two.doubt) == (0, "7", "")

        await store.progress(ids[:1], 1)  # part 0 went out; part 1 not begun
        [one, _] = (await store.replayable(3600))[1]
        assert (one.parts_sent, one.doubt) == (1, None)

        await store.intent(ids[:1], 1, "9")
        [one, _] = (await store.replayable(3600))[1]
        assert (one.parts_sent, one.doubt) == (1, "9")
    finally:
        await store.close()


def test_fake_discord_answers_a_repeated_enforced_nonce_with_the_first_message() -> None:
    with FakeDiscord() as fake:
        url = f"{fake.api_base}/channels/{fake.channel_id}/messages"
        auth = {"Authorization": f"Bot {fake.token}"}
        body = {"content": "hi", "nonce": "n1", "enforce_nonce": True}
        first = httpx.post(url, json=body, headers=auth).json()
        again = httpx.post(url, json=body, headers=auth).json()
        loose = httpx.post(url, json={**body, "enforce_nonce": False}, headers=auth).json()
    assert again["id"] == first["id"] and loose["id"] != first["id"]
    assert len(fake.sent) == 2 and fake.nonce_hits == [first]


def test_fake_slack_returns_metadata_only_when_asked() -> None:
    with FakeSlack() as fake:
        api, auth = fake.api_base, {"Authorization": f"Bearer {fake.bot_token}"}
        meta = {"event_type": "t", "event_payload": {"key": "k"}}
        post = {"channel": "D1", "text": "hi", "metadata": meta}
        httpx.post(api + "chat.postMessage", json=post, headers=auth)
        bare = httpx.post(api + "conversations.history", json={"channel": "D1"}, headers=auth)
        full = httpx.post(
            api + "conversations.history",
            json={"channel": "D1", "include_all_metadata": True},
            headers=auth,
        )
    assert "metadata" not in bare.json()["messages"][0]
    assert full.json()["messages"][0]["metadata"] == meta


def test_fake_telegram_answers_an_edit_probe_as_telegram_does() -> None:
    with FakeTelegram() as fake:
        api = f"{fake.api_url}{fake.token}"
        user = fake.send_text(555, "from the user")["message"]["message_id"]
        body = {"chat_id": 555, "text": "<b>part</b>", "parse_mode": "HTML"}
        mine = httpx.post(f"{api}/sendMessage", json=body).json()["result"]["message_id"]

        def edit(message_id: int, text: str = "<b>part</b>") -> str:
            probe = {**body, "message_id": message_id, "text": text}
            answer = httpx.post(f"{api}/editMessageText", json=probe).json()
            return str(answer.get("description", "ok"))

        same, missing, theirs = edit(mine), edit(mine + 5), edit(user)
        changed = edit(mine, "<b>other</b>")
    assert "message is not modified" in same
    assert "message to edit not found" in missing
    assert "message can't be edited" in theirs
    assert changed == "ok"  # a different text edits the message: why probes skip own ids
