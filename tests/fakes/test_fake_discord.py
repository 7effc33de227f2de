"""Drives the real discord.py against FakeDiscord: gateway lifecycle, REST, reconnects, commands.

Every test checks the `client.start()` task, because a parser error there looks like a hang.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import Any

import aiohttp
import discord
import pytest
import yarl
from discord import app_commands

from tests.fakes.discord import FakeDiscord
from tests.fakes.server import async_wait_until

TOKEN = "dc-token"
BOT_ID, GUILD_ID, CHANNEL_ID = 1000, 2000, 3000
MESSAGE_CONTENT = 1 << 15


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeDiscord]:
    fake = FakeDiscord(
        token=TOKEN, bot_id=BOT_ID, bot_name="hermes", guild_id=GUILD_ID, channel_id=CHANNEL_ID
    ).start()
    fake.patch(monkeypatch)
    yield fake
    fake.stop()
    assert fake.errors == []


class FastClient(discord.Client):
    async def before_identify_hook(self, shard_id: int | None, *, initial: bool = False) -> None:
        """The default sleeps 5 s before every IDENTIFY but the first (a rate-limit courtesy)."""


def make_client(*, message_content: bool = True) -> discord.Client:
    intents = discord.Intents.default()
    intents.message_content = message_content
    # guild_ready_timeout defaults to 2 s: on_ready waits that long after the last GUILD_CREATE.
    return FastClient(intents=intents, guild_ready_timeout=0.05)


class Bot:
    """A real discord.Client plus what it saw; `handler` answers each user message."""

    def __init__(
        self,
        *,
        message_content: bool = True,
        handler: Callable[[discord.Message], Awaitable[None]] | None = None,
    ) -> None:
        self.client = make_client(message_content=message_content)
        self.messages: list[discord.Message] = []
        self.own: list[discord.Message] = []  # Discord echoes the bot's own messages
        self.events: list[str] = []
        self.threads: list[discord.Thread] = []
        self.errors: list[BaseException | None] = []
        self.handler = handler
        listeners = (self.on_message, self.on_ready, self.on_resumed, self.on_thread_create)
        for listener in (*listeners, self.on_error):
            setattr(self.client, listener.__name__, listener)

    async def on_message(self, message: discord.Message) -> None:
        assert self.client.user is not None
        if message.author.id == self.client.user.id:
            self.own.append(message)
            return
        self.messages.append(message)
        if self.handler is not None:
            await self.handler(message)

    async def on_ready(self) -> None:
        self.events.append("ready")

    async def on_resumed(self) -> None:
        self.events.append("resumed")

    async def on_thread_create(self, thread: discord.Thread) -> None:
        self.threads.append(thread)

    async def on_error(self, event: str, *args: Any, **kwargs: Any) -> None:
        self.errors.append(sys.exc_info()[1])


def alive(task: asyncio.Task[None]) -> None:
    if task.done():
        task.result()  # raises what killed the client
        raise AssertionError("client.start() returned early")


async def eventually(
    task: asyncio.Task[None], predicate: Callable[[], Any], timeout: float = 5
) -> None:
    await async_wait_until(lambda: task.done() or predicate(), timeout)
    alive(task)


@contextlib.asynccontextmanager
async def running(bot: Bot, token: str = TOKEN) -> AsyncIterator[asyncio.Task[None]]:
    """Run the client in the test's loop until ready; afterwards close it and reap the task."""
    task = asyncio.create_task(bot.client.start(token))
    try:
        await eventually(task, bot.client.is_ready)
        yield task
        alive(task)
    finally:
        await bot.client.close()
        await asyncio.wait_for(task, 5)
    assert bot.errors == []


def channel_of(bot: Bot) -> discord.TextChannel:
    channel = bot.client.get_channel(CHANNEL_ID)
    assert isinstance(channel, discord.TextChannel)
    return channel


async def test_ready_then_guild_message_and_dm(fake: FakeDiscord) -> None:
    bot = Bot()
    async with running(bot) as task:
        client = bot.client
        assert client.user is not None
        assert (client.user.id, client.user.bot) == (BOT_ID, True)
        guild = client.get_guild(GUILD_ID)
        assert guild is not None
        assert guild.me is not None
        assert guild.default_role.id == GUILD_ID
        assert channel_of(bot).name == "general"
        assert bot.events == ["ready"]
        assert fake.identifies == 1
        assert fake.intents == client.intents.value
        assert fake.ops[:2] == [1, 2]  # discord.py heartbeats right after HELLO, then identifies
        sent = fake.send_message("hello", user_id=42, username="alice")
        dm = fake.send_dm("psst", user_id=43, username="bob")
        await eventually(task, lambda: len(bot.messages) == 2)
    in_guild, direct = bot.messages
    assert (in_guild.id, in_guild.content, in_guild.author.name) == (
        int(sent["id"]),
        "hello",
        "alice",
    )
    assert isinstance(in_guild.channel, discord.TextChannel)
    assert in_guild.channel.id == CHANNEL_ID
    assert isinstance(in_guild.author, discord.Member)
    assert in_guild.guild == guild
    assert isinstance(direct.channel, discord.DMChannel)
    assert direct.guild is None
    assert (direct.content, direct.author.id, direct.channel.id) == (
        "psst",
        43,
        int(dm["channel_id"]),
    )


async def test_reply_with_typing_then_edit(fake: FakeDiscord) -> None:
    async def handler(message: discord.Message) -> None:
        async with message.channel.typing():
            reply = await message.reply("thinking")
        assert reply.reference is not None
        assert reply.reference.message_id == message.id
        await reply.edit(content="done")

    bot = Bot(handler=handler)
    async with running(bot) as task:
        incoming = fake.send_message("question")
        await eventually(task, lambda: fake.edits and len(bot.own) == 1)
    out = fake.sent[0]
    assert (out["content"], out["channel_id"], out["type"]) == ("done", str(CHANNEL_ID), 19)
    assert out["message_reference"]["message_id"] == incoming["id"]
    assert out["referenced_message"]["content"] == "question"
    assert out["edited_timestamp"] is not None
    assert fake.typing == [CHANNEL_ID]
    assert [e["content"] for e in fake.edits] == ["done"]
    assert [m["content"] for m in fake.messages_in(CHANNEL_ID)] == ["question", "done"]


async def test_reconnect_resumes_and_replays_missed_message_once(fake: FakeDiscord) -> None:
    bot = Bot()
    async with running(bot) as task:
        fake.send_message("before")
        await eventually(task, lambda: len(bot.messages) == 1)
        fake.reconnect()
        assert not fake.connected.is_set()
        fake.send_message("during")  # queued: the session has no socket until RESUME
        await eventually(task, lambda: "resumed" in bot.events)
        fake.send_message("after")
        await eventually(task, lambda: len(bot.messages) >= 3)
        await asyncio.sleep(0.05)  # room for a duplicate to show up
    assert [m.content for m in bot.messages] == ["before", "during", "after"]
    assert (fake.identifies, fake.resumes) == (1, 1)
    assert 6 in fake.ops
    assert fake.ops.count(2) == 1
    assert bot.events == ["ready", "resumed"]


@pytest.mark.parametrize("resumable", [False, True])
async def test_invalid_session(fake: FakeDiscord, resumable: bool) -> None:
    bot = Bot()
    async with running(bot) as task:
        fake.invalid_session(resumable=resumable)
        await eventually(task, fake.connected.is_set)
        if resumable:
            assert (fake.identifies, fake.resumes) == (1, 1)
        else:
            assert (fake.identifies, fake.resumes, 6 in fake.ops) == (2, 0, False)
            await eventually(task, lambda: bot.events.count("ready") == 2)
        fake.send_message("after")
        await eventually(task, lambda: bot.messages)
    assert bot.messages[0].content == "after"


@pytest.mark.parametrize("code", [None, 4000])
async def test_dropped_socket_reconnects_and_resumes(fake: FakeDiscord, code: int | None) -> None:
    bot = Bot()
    async with running(bot) as task:
        fake.drop_socket(code)
        fake.send_message("while down")
        await eventually(task, lambda: fake.resumes == 1 and fake.connected.is_set())
        await eventually(task, lambda: bot.messages)
        await asyncio.sleep(0.05)
    assert [m.content for m in bot.messages] == ["while down"]
    assert fake.identifies == 1


async def test_without_message_content_intent_only_mentions_and_dms_keep_text(
    fake: FakeDiscord,
) -> None:
    bot = Bot(message_content=False)
    async with running(bot) as task:
        assert fake.intents is not None
        assert not fake.intents & MESSAGE_CONTENT
        fake.send_message("secret")
        fake.send_message("hey bot", mentions_bot=True)
        fake.send_dm("dm text")
        await eventually(task, lambda: len(bot.messages) == 3)
        me = bot.client.user
    plain, mention, dm = bot.messages
    assert plain.content == ""
    assert mention.content == f"<@{BOT_ID}> hey bot"
    assert me in mention.mentions
    assert dm.content == "dm text"
    assert fake.messages_in(CHANNEL_ID)[0]["content"] == "secret"  # stripped per session only


async def test_disallowed_intent_closes_4014(fake: FakeDiscord) -> None:
    fake.message_content_intent = False  # the developer-portal toggle is off
    client = make_client(message_content=True)
    try:
        with pytest.raises(discord.PrivilegedIntentsRequired):
            await asyncio.wait_for(client.start(TOKEN), 5)
    finally:
        await client.close()
    assert (fake.identifies, fake.intents) == (1, None)


async def test_bad_token_fails_login(fake: FakeDiscord) -> None:
    client = make_client()
    try:
        with pytest.raises(discord.LoginFailure):
            await client.start("wrong-token")
    finally:
        await client.close()
    assert fake.requests == [("GET", "/users/@me")]


async def test_gateway_closes_4004_on_bad_identify(fake: FakeDiscord) -> None:
    async with aiohttp.ClientSession() as session, session.ws_connect(fake.gateway_url) as ws:
        hello = await ws.receive_json()
        assert (hello["op"], hello["d"]["heartbeat_interval"]) == (10, 1000)
        await ws.send_json({"op": 1, "d": None})
        assert (await ws.receive_json())["op"] == 11
        await ws.send_json({"op": 2, "d": {"token": "nope", "intents": 0, "properties": {}}})
        closing = await ws.receive()
    assert (closing.type, closing.data) == (aiohttp.WSMsgType.CLOSE, 4004)
    assert fake.ops == [1, 2]
    assert not fake.connected.is_set()


async def test_rest_wire_format(fake: FakeDiscord) -> None:
    auth = {"Authorization": f"Bot {TOKEN}"}
    async with aiohttp.ClientSession() as http:
        async with http.get(f"{fake.api_base}/users/@me", headers=auth) as r:
            # Exactly application/json: discord.py reads anything else (even + charset) as text.
            assert (r.status, r.headers["Content-Type"]) == (200, "application/json")
            assert (await r.json())["id"] == str(BOT_ID)
        async with http.get(f"{fake.api_base}/users/@me") as r:
            assert r.status == 401
        async with http.get(f"{fake.api_base}/no/such/route", headers=auth) as r:
            assert (r.status, r.headers["Content-Type"]) == (404, "application/json")
            assert (await r.json())["code"] == 0
        fake.fail_next("GET", r"/gateway/bot$", status=429, retry_after=0.25)
        async with http.get(f"{fake.api_base}/gateway/bot", headers=auth) as r:
            assert (r.status, r.headers["Retry-After"], r.headers["Via"]) == (
                429,
                "1",
                "1.1 google",
            )
            body = await r.json()
        async with http.get(f"{fake.api_base}/gateway/bot", headers=auth) as r:
            assert (r.status, (await r.json())["url"]) == (200, fake.gateway_url)
    assert body == {"message": "You are being rate limited.", "retry_after": 0.25, "global": False}


async def test_history_pages_after_and_before_an_id_like_discord(fake: FakeDiscord) -> None:
    ids = [int(fake.send_message(f"m{i}")["id"]) for i in range(6)]
    bot = Bot()
    async with running(bot):
        channel = channel_of(bot)
        after = [m.content async for m in channel.history(after=discord.Object(ids[1]), limit=3)]
        every = [m.content async for m in channel.history(after=discord.Object(ids[1]))]
        before = [m.content async for m in channel.history(before=discord.Object(ids[4]))]
    assert after == ["m2", "m3", "m4"]  # the oldest after the id, oldest first
    assert every == ["m2", "m3", "m4", "m5"]
    assert before == ["m3", "m2", "m1", "m0"]  # newest first
    auth = {"Authorization": f"Bot {TOKEN}"}
    async with aiohttp.ClientSession() as http:
        url = f"{fake.api_base}/channels/{CHANNEL_ID}/messages?after={ids[1]}&limit=2"
        async with http.get(url, headers=auth) as r:
            page = [m["content"] for m in await r.json()]
    assert page == ["m3", "m2"]  # Discord's page after an id: its oldest, newest first


async def test_content_over_2000_chars_is_rejected(fake: FakeDiscord) -> None:
    bot = Bot()
    async with running(bot):
        with pytest.raises(discord.HTTPException) as info:
            await channel_of(bot).send("x" * 2001)
        ok = await channel_of(bot).send("x" * 2000)
    assert (info.value.status, info.value.code) == (400, 50035)
    assert "2000 or fewer" in info.value.text
    assert [m["id"] for m in fake.sent] == [str(ok.id)]


async def test_429_is_retried_by_discord_py(fake: FakeDiscord) -> None:
    bot = Bot()
    async with running(bot):
        fake.fail_next("POST", r"^/channels/\d+/messages$", status=429, retry_after=0.1)
        started = time.monotonic()
        message = await channel_of(bot).send("after a 429")
        elapsed = time.monotonic() - started
    posts = [r for r in fake.requests if r == ("POST", f"/channels/{CHANNEL_ID}/messages")]
    assert len(posts) == 2
    assert elapsed >= 0.1
    assert [m["id"] for m in fake.sent] == [str(message.id)]


async def test_slash_commands_sync_dispatch_and_respond(fake: FakeDiscord) -> None:
    bot = Bot()
    tree = app_commands.CommandTree(bot.client)
    ran: list[tuple[int, int | None, str]] = []
    tree_errors: list[Exception] = []

    @tree.command(name="stop", description="Stop the current run")
    async def stop(interaction: discord.Interaction, reason: str = "none") -> None:
        ran.append((interaction.user.id, interaction.channel_id, reason))
        await interaction.response.send_message(f"stopping: {reason}")
        await interaction.followup.send("stopped")

    @tree.command(name="slow", description="Defer, then answer")
    async def slow(interaction: discord.Interaction) -> None:
        await interaction.response.defer(thinking=True)
        await interaction.followup.send("finally")

    @tree.error
    async def on_tree_error(interaction: discord.Interaction, error: Exception) -> None:
        tree_errors.append(error)

    async with running(bot) as task:
        synced = await tree.sync()
        registered = {c["name"]: c for c in fake.commands}
        assert sorted(c.name for c in synced) == sorted(registered) == ["slow", "stop"]
        assert registered["stop"]["options"][0]["name"] == "reason"
        assert {c.id for c in synced} == {int(c["id"]) for c in fake.commands}
        payload = fake.send_interaction("stop", options={"reason": "enough"})
        await eventually(task, lambda: len(fake.interaction_responses) == 2)
        fake.send_interaction("slow")
        await eventually(task, lambda: len(fake.interaction_responses) == 4)
    assert tree_errors == []
    assert ran == [(42, CHANNEL_ID, "enough")]
    callback, followup, deferred, late = fake.interaction_responses
    assert (callback["kind"], callback["type"]) == ("callback", 4)
    assert callback["interaction_id"] == int(payload["id"])
    assert callback["data"]["content"] == "stopping: enough"
    assert (followup["kind"], followup["content"]) == ("followup", "stopped")
    assert (deferred["type"], late["content"]) == (5, "finally")
    # The followup after a deferral replaced the "thinking..." message instead of adding one.
    contents = [m["content"] for m in fake.messages_in(CHANNEL_ID)]
    assert contents == ["stopping: enough", "stopped", "finally"]


async def test_thread_message_arrives_on_the_thread(fake: FakeDiscord) -> None:
    async def handler(message: discord.Message) -> None:
        await message.channel.send("answer in thread")

    bot = Bot(handler=handler)
    async with running(bot) as task:
        thread_id = fake.create_thread(name="topic")
        await eventually(task, lambda: bot.threads)
        fake.send_message("in a thread", thread_id=thread_id)
        await eventually(task, lambda: fake.sent)
    assert (bot.threads[0].id, bot.threads[0].name) == (thread_id, "topic")
    channel = bot.messages[0].channel
    assert isinstance(channel, discord.Thread)
    assert channel.id == thread_id
    assert channel.parent is not None
    assert channel.parent.id == CHANNEL_ID
    assert fake.sent[0]["channel_id"] == str(thread_id)
    assert [m["content"] for m in fake.messages_in(thread_id)] == [
        "in a thread",
        "answer in thread",
    ]


async def test_attachments_reactions_uploads_and_delete(fake: FakeDiscord) -> None:
    bot = Bot()
    async with running(bot) as task:
        upload = {"filename": "notes.txt", "data": b"hello", "content_type": "text/plain"}
        fake.send_message("see file", attachments=[upload])
        await eventually(task, lambda: bot.messages)
        incoming = bot.messages[0]
        downloaded = await incoming.attachments[0].read()
        await incoming.add_reaction("👀")
        assert bot.client.user is not None
        await incoming.remove_reaction("👀", bot.client.user)
        out = await incoming.channel.send("result", file=discord.File(io.BytesIO(b"data"), "r.bin"))
        await out.delete()
    assert (incoming.attachments[0].filename, downloaded) == ("notes.txt", b"hello")
    assert [(r["emoji"], r["action"]) for r in fake.reactions] == [("👀", "add"), ("👀", "remove")]
    assert out.attachments[0].filename == "r.bin"
    assert (fake.uploads[0]["filename"], fake.uploads[0]["data"]) == ("r.bin", b"data")
    assert fake.deleted == [{"channel_id": CHANNEL_ID, "message_id": out.id}]
    assert [m["content"] for m in fake.messages_in(CHANNEL_ID)] == ["see file"]


async def test_cdn_files_announced_sizes_chunking_and_faults(fake: FakeDiscord) -> None:
    plain = fake.add_file("a.png", b"\x89PNG" * 10, "image/png")
    lying = fake.add_file("b.bin", b"x" * 10_000, size=10, chunked=True)
    fake.fail_file_next(503)
    assert plain["url"].startswith(f"{fake.cdn_base}/attachments/{CHANNEL_ID}/")
    assert (plain["size"], lying["size"]) == (40, 10)
    async with aiohttp.ClientSession() as session:
        async with session.get(plain["url"]) as resp:
            assert resp.status == 503
        async with session.get(plain["url"]) as resp:
            assert (resp.content_length, await resp.read()) == (40, b"\x89PNG" * 10)
        async with session.get(lying["url"]) as resp:
            assert (resp.content_length, len(await resp.read())) == (None, 10_000)
    assert [r["path"].rsplit("/", 1)[-1] for r in fake.file_requests] == ["a.png"] * 2 + ["b.bin"]


async def test_cdn_links_are_signed_expire_and_are_renewed(fake: FakeDiscord) -> None:
    live = fake.add_file("a.png", b"live", "image/png")
    dead = fake.add_file("b.png", b"dead", "image/png", expires_in=-60)
    gone = fake.add_file("c.png", b"gone", "image/png")
    fake.delete_file(gone)
    forged = live["url"].replace("hm=", "hm=0")
    bot = Bot()
    async with running(bot), aiohttp.ClientSession() as session:
        for url, status in [(live["url"], 200), (dead["url"], 404), (forged, 404)]:
            async with session.get(url) as resp:
                assert resp.status == status, url
        urls = [dead["url"], gone["url"], "https://example.com/x.png"]
        route = discord.http.Route("POST", "/attachments/refresh-urls")
        answer = await bot.client.http.request(route, json={"attachment_urls": urls})
        renewed, same_gone, same_foreign = (r["refreshed"] for r in answer["refreshed_urls"])
        async with session.get(renewed) as resp:
            assert (resp.status, await resp.read()) == (200, b"dead")
        with pytest.raises(discord.HTTPException):
            await bot.client.http.request(route, json={"attachment_urls": []})
    assert [r["original"] for r in answer["refreshed_urls"]] == urls
    assert renewed.split("?")[0] == dead["url"].split("?")[0] != renewed
    assert (same_gone, same_foreign) == (gone["url"], "https://example.com/x.png")
    assert fake.refreshed == urls


def test_patched_sets_and_restores_discord_globals() -> None:
    route, ws = discord.http.Route, discord.gateway.DiscordWebSocket
    before = (route.BASE, ws.DEFAULT_GATEWAY)
    fake = FakeDiscord().start()
    try:
        with fake.patched():
            assert route.BASE == fake.api_base == f"{fake.url}/api/v10"
            assert yarl.URL(fake.gateway_url) == ws.DEFAULT_GATEWAY
    finally:
        fake.stop()
    assert before == (route.BASE, ws.DEFAULT_GATEWAY)


async def test_shards_each_get_their_guilds_events_and_dms_go_to_shard_zero(
    fake: FakeDiscord,
) -> None:
    other_guild, other_channel = (1 << 22) + GUILD_ID, 3001  # (id >> 22) % 2 == 1
    fake.add_guild(other_guild, other_channel)
    fake.shard_count = 2
    seen: dict[int, list[tuple[int | None, str]]] = {0: [], 1: []}
    ready: dict[int, list[int]] = {}
    clients = []
    for shard in (0, 1):
        intents = discord.Intents.default()
        intents.message_content = True
        client = FastClient(
            intents=intents,
            guild_ready_timeout=0.05,
            shard_id=shard,
            shard_count=2,
        )

        async def on_message(message: discord.Message, shard: int = shard) -> None:
            seen[shard].append((message.guild.id if message.guild else None, message.content))

        async def on_ready(shard: int = shard, client: discord.Client = client) -> None:
            ready[shard] = [g.id for g in client.guilds]

        client.on_message, client.on_ready = on_message, on_ready  # type: ignore[method-assign]
        clients.append(client)
    tasks = [asyncio.create_task(client.start(TOKEN)) for client in clients]
    try:
        await async_wait_until(lambda: len(ready) == 2 or any(t.done() for t in tasks))
        for task in tasks:
            alive(task)
        assert ready == {0: [GUILD_ID], 1: [other_guild]}
        assert sorted(fake.identified) == [(0, 2), (1, 2)]
        fake.send_message("in guild 0")
        fake.send_message("in guild 1", channel_id=other_channel)
        fake.send_dm("a dm")
        await async_wait_until(lambda: len(seen[0]) + len(seen[1]) == 3)
        await asyncio.sleep(0.2)  # nothing more comes
    finally:
        for client in clients:
            await client.close()
        await asyncio.wait_for(asyncio.gather(*tasks), 5)
    assert seen == {
        0: [(GUILD_ID, "in guild 0"), (None, "a dm")],
        1: [(other_guild, "in guild 1")],
    }
    async with aiohttp.ClientSession() as http:
        bot = {"Authorization": f"Bot {TOKEN}"}
        async with http.get(f"{fake.api_base}/gateway/bot", headers=bot) as answer:
            assert (await answer.json())["shards"] == 2
