"""The Matrix adapter's parts on their own: what a room event becomes (junk skipped, mentions,
replies and threads told apart), the Markdown as Matrix HTML, the kept sync token, and Synapse's
``M_LIMIT_EXCEEDED`` waited out as its ``retry_after_ms`` says."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any, cast

import httpx
import structlog
from hypothesis import given, settings
from hypothesis import strategies as st

from adapters.matrix.api import client
from adapters.matrix.normalize import Where, normalize
from adapters.matrix.render import content, html_to_plain, render, to_matrix_html
from adapters.matrix.replies import Wire
from adapters.matrix.state import SyncState
from adapters.matrix.sync import Batch, Syncer, _next
from hermes_gateway.platforms import BotIdentity
from tests.matrix_server import Synapse

ME = BotIdentity("@bot:hermes.test", "bot")
ROOM = Where("!r:hermes.test", direct=False)


def message(**content: Any) -> dict[str, Any]:
    body = {"msgtype": "m.text", "body": "hello", **content}
    return {
        "type": "m.room.message",
        "sender": "@a:hermes.test",
        "event_id": "$e1",
        "content": body,
    }


def test_a_room_message_is_for_the_bot_only_when_it_is_addressed() -> None:
    plain = normalize(message(), ME, ROOM, per_user=True)
    assert plain is not None and not plain.event.mentioned
    assert plain.event.chat_type == "group" and plain.event.reply_to == "$e1"
    named = message(**{"m.mentions": {"user_ids": [ME.user_id]}})
    assert normalize(named, ME, ROOM, per_user=True).event.mentioned  # type: ignore[union-attr]
    pill = message(formatted_body='<a href="https://matrix.to/#/%40bot:hermes.test">bot</a>')
    assert normalize(pill, ME, ROOM, per_user=True).event.mentioned  # type: ignore[union-attr]
    replied = Where(ROOM.room_id, direct=False, replied_to_me=True)
    assert normalize(message(), ME, replied, per_user=True).event.mentioned  # type: ignore[union-attr]


def test_a_thread_is_a_session_and_a_reply_loses_its_quote() -> None:
    rel = {"rel_type": "m.thread", "event_id": "$root", "m.in_reply_to": {"event_id": "$x"}}
    body = "> <@a:hermes.test> earlier words\n\nthe answer"
    inbound = normalize(message(body=body, **{"m.relates_to": rel}), ME, ROOM, per_user=True)
    assert inbound is not None
    event = inbound.event
    assert (event.chat_type, event.thread_id, event.text) == ("thread", "$root", "the answer")
    assert event.session_key == "matrix:thread:!r:hermes.test:$root"


def test_edits_the_bot_itself_and_notices_are_told_apart() -> None:
    edit = message(**{"m.relates_to": {"rel_type": "m.replace", "event_id": "$e0"}})
    assert normalize(edit, ME, ROOM, per_user=True) is None
    own = normalize({**message(), "sender": ME.user_id}, ME, ROOM, per_user=True)
    assert own is not None and own.sender == "self"
    notice = normalize(message(msgtype="m.notice"), ME, ROOM, per_user=True)
    assert notice is not None and notice.sender == "bot"


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner),
    max_leaves=12,
)
keys = st.sampled_from(
    ["msgtype", "body", "url", "info", "m.relates_to", "m.mentions", "formatted_body", "filename"]
)


@settings(max_examples=100, deadline=None)
@given(st.dictionaries(keys, json_values), json_values, json_values)
def test_any_content_is_normalized_or_skipped_never_raised(
    body: dict[str, Any], sender: Any, event_id: Any
) -> None:
    raw = {"type": "m.room.message", "sender": sender, "event_id": event_id, "content": body}
    normalize(raw, ME, ROOM, per_user=True)
    normalize(body, ME, ROOM, per_user=False)


def test_markdown_becomes_matrix_html_with_a_plain_body_beside_it() -> None:
    html = to_matrix_html("# Title\n\n**bold** and `code` [link](https://x.test/a?b=1&c=2)\n\n> q")
    assert html == (
        "<h3>Title</h3>\n\n<p><strong>bold</strong> and <code>code</code> "
        '<a href="https://x.test/a?b=1&amp;c=2">link</a></p>\n\n<blockquote><p>q</p></blockquote>'
    )
    assert html_to_plain(html) == "Title\n\nbold and code link\n\nq"
    fence = to_matrix_html("```python\nx < 1\n```")
    assert fence == '<pre><code class="language-python">x &lt; 1</code></pre>'
    table = content(to_matrix_html("| a | b |\n|---|---|\n| 1 | 2 |"))
    assert (
        table["formatted_body"]
        == "<table><tr><th>a</th><th>b</th></tr><tr><td>1</td><td>2</td></tr></table>"
    )
    assert "<script>" not in to_matrix_html("<script>alert(1)</script>")
    parts = render("x " * 9000)
    assert len(parts) == 3 and all(len(p) <= 8000 for p in parts)


async def test_the_sync_token_survives_a_restart_and_a_torn_file_starts_afresh(
    tmp_path: Path,
) -> None:
    state = SyncState(tmp_path, "https://hs.test/", "@bot:hs.test")
    await state.save(since="s1")
    await state.save(told="!enc:hs.test")
    again = SyncState(tmp_path, "https://hs.test", "@bot:hs.test")
    kept = await again.load()
    assert (kept.since, kept.told_encrypted) == ("s1", frozenset({"!enc:hs.test"}))
    assert json.loads(state.path.read_text())["since"] == "s1"
    state.path.write_text('{"since": ')
    assert (await SyncState(tmp_path, "https://hs.test", "@bot:hs.test").load()).since == ""


async def test_m_limit_exceeded_is_waited_out_as_synapse_asks(synapse: Synapse) -> None:
    """The bot's own message limit set strict through Synapse's admin API (one a second)."""
    bot, alice = synapse.register(), synapse.register()
    admin = synapse.register(admin=True)
    limit = {"messages_per_second": 1, "burst_count": 1}
    path = f"{synapse.url}/_synapse/admin/v1/users/{bot.user_id}/override_ratelimit"
    headers = {"Authorization": f"Bearer {admin.token}"}
    httpx.post(path, json=limit, headers=headers, timeout=10).raise_for_status()
    room = await asyncio.to_thread(alice.create_room, [bot.user_id])
    await asyncio.to_thread(bot.join, room)
    api = client(synapse.url, bot.token, 30)
    wire = Wire(api, 20)
    try:
        with structlog.testing.capture_logs() as logs:
            for n in range(3):
                await wire.send(room, {"msgtype": "m.text", "body": f"m{n}"}, f"t{n}")
    finally:
        await api.api.session.close()
    said = await asyncio.to_thread(alice.from_user, room, bot.user_id)
    assert [m["content"]["body"] for m in said] == ["m0", "m1", "m2"]
    waits = [e["retry_after"] for e in logs if e["event"] == "retry.rate_limited"]
    assert waits and all(0 < w <= 3 for w in waits)  # Synapse's retry_after_ms, in seconds


async def test_a_gappy_timeline_is_filled_back_to_the_kept_token(
    synapse: Synapse, tmp_path: Path
) -> None:
    """More messages than a sync's timeline holds came while the bot was away: the rest are
    fetched from /messages, oldest first, none twice."""
    bot, alice = synapse.register(), synapse.register()
    room = await asyncio.to_thread(alice.create_room, [bot.user_id])
    await asyncio.to_thread(bot.join, room)
    api = client(synapse.url, bot.token, 30)
    syncer = Syncer(api, SyncState(tmp_path, synapse.url, bot.user_id), cast(Batch, None), 1)
    try:
        kept = _next(await syncer._sync(None, 0, 1))
        for n in range(8):
            await asyncio.to_thread(alice.say, room, f"m{n}")
        answer = await syncer._sync(kept, 0, 3)
        joined = answer["rooms"]["join"][room]
        assert joined["timeline"]["limited"] is True and len(joined["timeline"]["events"]) == 3
        events = await syncer._timeline(room, joined, kept)
    finally:
        await api.api.session.close()
    said = [e["content"]["body"] for e in events if e["type"] == "m.room.message"]
    assert said == [f"m{n}" for n in range(8)]
