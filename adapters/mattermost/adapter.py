"""Mattermost: a bot account's WebSocket for intake and its REST v4 API for the rest (aiohttp
for both); every post goes through one intake worker, in order, and a REST catch-up follows
each (re)connect and ``seq`` gap."""

from __future__ import annotations

import asyncio
import hashlib
from dataclasses import replace
from pathlib import Path

import aiohttp
import structlog

from adapters.mattermost.api import MattermostApi
from adapters.mattermost.catchup import CatchUp
from adapters.mattermost.cursor import Cursors
from adapters.mattermost.inbound import Posted, from_event, normalize, thread_of
from adapters.mattermost.replies import PostReply, preview_wire, split_parts, take_preview
from adapters.mattermost.settings import MattermostConfig, api_base
from adapters.mattermost.socket import Frame, frames, open_socket
from hermes_gateway.platforms import (
    AdapterAuthError,
    AdapterError,
    AdapterHost,
    Attachment,
    Backoff,
    BotIdentity,
    Downloader,
    GiveUp,
    Health,
    Intake,
    LifecycleEvent,
    MessageEvent,
    OutboundMessage,
    PreviewBook,
    Recent,
    Replier,
    RetryLater,
    StreamSink,
    Supervisor,
    TransientAdapterError,
    TypingIndicator,
    first_of,
    origins,
)

log = structlog.get_logger("hermes.adapters.mattermost")
START_TIMEOUT_S = 15.0  # /users/me, the socket, its challenge and hello
QUEUE_MAX = 10_000  # posts read off the socket and not yet taken


class MattermostAdapter:
    name = "mattermost"
    preview_interval = 1.0  # seconds between edits of a streamed preview
    typing_interval = 3.0  # Mattermost shows "typing" for about 5 s after each call
    retry_first, retry_max = 0.5, 30.0

    def __init__(self, host: AdapterHost) -> None:
        self.host = host
        section = self.config
        self.intake = Intake(host, self.name)
        self.api = MattermostApi(section.url, section.token)
        self.me = BotIdentity("")
        self.files_url = api_base(section.url) + "/files"
        self.files = Downloader(
            self.name,
            host.config.home_path / "media",
            section.media_max_bytes,
            origins(section.url),
        )
        home = host.config.home_path / "mattermost"
        self.cursors = Cursors(home / "cursors.json", section.catch_up_channels)
        self.catch_up = CatchUp(self.api, self.cursors, section.catch_up_max_age_s)
        # one socket per bot in a cluster: every instance's socket would get every post (the
        # token names the bot without putting it in a lease's key)
        bot = hashlib.sha256(f"{api_base(section.url)} {section.token}".encode()).hexdigest()
        self.lead = host.leadership(f"mattermost-socket:{bot[:16]}")
        self._queue: asyncio.Queue[Posted | str] = asyncio.Queue(QUEUE_MAX)
        self._seen = Recent()  # post ids taken by this process
        self._threads = Recent()  # threads the bot answers in: a reply there needs no mention
        self._previews: PreviewBook[str, str] = PreviewBook(self.name, host.remember_preview)
        self._replier = Replier(self._previews)
        self._tasks: list[asyncio.Task[None]] = []
        self._direct: dict[str, str] = {}  # user id -> the bot's direct channel with them
        self._stopped = False
        self.supervisor = Supervisor(
            self.name,
            self._connect_once,
            backoff=Backoff(self.retry_first, self.retry_max, factor=1.5),
            describe=lambda _n, exc, _w: (
                f"connecting (last error: {str(exc) or type(exc).__name__})"
            ),
        )
        self.typing = (
            TypingIndicator(host.bus, self.name, self._typing, interval=self.typing_interval)
            if section.typing
            else None
        )
        host.bus.subscribe(self._on_lifecycle, ("processing_complete",), name="mattermost:preview")

    @property
    def config(self) -> MattermostConfig:
        """This platform's section of the config in force, read at each use (a SIGHUP reload
        changes its access rules)."""
        return self.host.config.platforms.section(self.name, MattermostConfig)

    # -- lifecycle ----------------------------------------------------------------------

    async def start(self) -> None:
        """Check the token (a refused one raises `AdapterAuthError`: exit 78) and connect;
        network trouble is retried in the background while the gateway serves."""
        await self.cursors.load()
        loop = asyncio.get_running_loop()
        self._tasks = [
            loop.create_task(self._work(), name="adapter:mattermost:intake"),
            loop.create_task(self.cursors.keep_flushing(), name="adapter:mattermost:cursors"),
        ]
        self.supervisor.down("connecting")
        self.supervisor.start()
        await self.supervisor.settled(START_TIMEOUT_S + 1)
        if self.supervisor.fatal is not None:
            raise self.supervisor.fatal

    async def stop(self) -> None:
        """Stop intake: close the socket; the catch-up of the next start takes what follows."""
        await self.supervisor.stop()
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks = []
        await self.cursors.flush()
        await self.lead.release()

    async def close(self) -> None:
        self._stopped = True
        await self.stop()
        if self.typing is not None:
            self.typing.stop_all()
        self._previews.cancel_all()
        await self.files.aclose()
        await self.api.close()

    def health(self) -> Health:
        if self._stopped:
            return Health(False, "stopped")
        return self.supervisor.health

    async def _connect_once(self) -> None:
        """Connect, catch up, and read the socket until it closes (or this instance stops
        leading: another then holds the socket)."""
        if not self.lead.leading:
            # replies still go out from here: ready, while another instance reads the socket
            self.supervisor.ready("socket stand-by: another instance holds it")
            await self.lead.acquire()
        section = self.config
        try:
            me = await self.api.me()
            self.me = BotIdentity(str(me.get("id") or ""), username=str(me.get("username") or ""))
            ws = await open_socket(
                self.api.session,
                section.url,
                section.token,
                section.ping_interval_s,
                START_TIMEOUT_S,
            )
        except AdapterAuthError as exc:
            log.error("mattermost.auth_failed", error=str(exc))
            raise GiveUp(str(exc)) from exc
        try:
            self.supervisor.ready(f"@{self.me.username} connected")
            log.info("mattermost.connected", bot=self.me.username)
            await self._queue.put("catch-up")  # what was posted while nobody listened
            await self._read(ws)
        finally:
            await ws.close()

    async def _read(self, ws: aiohttp.ClientWebSocketResponse) -> None:
        reading = asyncio.ensure_future(self._frames(ws))
        lost = asyncio.ensure_future(self.lead.lost())
        await first_of(reading, lost)
        if lost.done() and not lost.cancelled():
            log.warning("mattermost.socket_lead_lost")
            await self.lead.release()
            raise RetryLater(0.0)
        reading.result()

    async def _frames(self, ws: aiohttp.ClientWebSocketResponse) -> None:
        async for frame in frames(ws):
            await self._on_frame(frame)

    async def _on_frame(self, frame: Frame) -> None:
        if frame.gap:
            await self._queue.put("catch-up")
        posted = from_event(frame.event)
        if posted is not None:
            await self._queue.put(posted)
        elif frame.event.get("event") == "posted":
            log.warning("mattermost.post_unreadable", seq=frame.event.get("seq"))

    # -- intake -------------------------------------------------------------------------

    async def _work(self) -> None:
        """The one intake worker: posts off the socket and catch-ups, in the order queued."""
        while True:
            item = await self._queue.get()
            try:
                if isinstance(item, Posted):
                    await self._take(item)
                else:
                    await self.catch_up.run(self._take, self._channel_type)
            except asyncio.CancelledError:
                raise
            except Exception:  # nothing a payload holds may stop intake
                log.exception("mattermost.intake_failed")

    async def _take(self, posted: Posted) -> None:
        post_id = str(posted.post.get("id") or "")
        channel = posted.channel_id
        if not post_id or not channel or post_id in self._seen:
            return
        while True:
            taken = await self.intake.take(
                lambda per_user: normalize(
                    posted,
                    self.me,
                    self.files_url,
                    thread_of(posted.post) in self._threads,
                    per_user=per_user,
                ),
                durable=True,
            )
            if taken.outcome != "unavailable":
                break
            log.warning("mattermost.post_waiting_for_store", post_id=post_id)
            await self.host.writable()  # the post is held here meanwhile, not lost
        if taken.outcome == "closed":  # shutting down: the next start's catch-up takes it
            self.cursors.rewind(channel, posted.create_at - 1)
            return
        self._seen.add(post_id)
        self.cursors.saw(channel, posted.create_at, posted.channel_type)
        # a thread the bot posted in or took a message from: a reply there needs no mention
        if taken.outcome == "accepted" or self.me.is_me(posted.post.get("user_id")):
            self._threads.add(thread_of(posted.post))

    async def _channel_type(self, channel: str) -> str:
        return str((await self.api.channel(channel)).get("type") or "")

    # -- delivery -----------------------------------------------------------------------

    async def send(self, message: OutboundMessage) -> None:
        """Markdown parts under `message_limit` into the thread (or the direct channel); each
        part retried on its own, never posted twice; a streamed preview becomes part 1."""
        channel = await self._channel_for(message.chat_id)
        root = message.thread_id or ""
        parts = split_parts(message.text, self.config.message_limit)
        preview = await take_preview(self._previews, message)
        wire = PostReply(self.api, channel, root, self.me.user_id)
        await self._replier.send(message, parts, wire, preview)
        if root:
            self._threads.add(root)

    async def _channel_for(self, chat_id: str) -> str:
        """A channel id as it is; ``@<user id>``: the bot's direct channel with that user
        (a scheduled job's answer addressed to a person)."""
        if not chat_id.startswith("@"):
            return chat_id
        user = chat_id[1:]
        if user not in self._direct:
            if not self.me.user_id:
                raise TransientAdapterError("mattermost: not connected yet")
            channel = await self.api.direct_channel(self.me.user_id, user)
            self._direct[user] = str(channel.get("id") or "")
        return self._direct[user]

    async def download(self, attachment: Attachment) -> Path:
        """Fetch a file (GET /files/{id}, with the token) into ``<home>/media`` when a tool asks,
        its name and size asked first (GET /files/{id}/info); one over `media_max_bytes` or on
        another host is refused (`PermanentAdapterError`)."""
        self.files.set_cap(self.config.media_max_bytes)
        bearer = {"Authorization": f"Bearer {self.config.token}"}
        return await self.files.fetch(attachment, bearer, locate=self._locate)

    async def _locate(self, attachment: Attachment) -> Attachment:
        info = await self.api.file_info(attachment.file_id)
        size = info.get("size")
        return replace(
            attachment,
            name=attachment.name or str(info.get("name") or ""),
            size=size if isinstance(size, int) else attachment.size,
            url=f"{self.files_url}/{attachment.file_id}",
        )

    async def _typing(self, event: MessageEvent) -> None:
        if self.me.user_id:
            await self.api.typing(self.me.user_id, event.chat_id, event.thread_id or "")

    def stream(self, event: MessageEvent) -> StreamSink | None:
        if not self.config.streaming:
            return None
        wire = preview_wire(self.api, event, self.config.message_limit, self.preview_interval)
        return self._previews.open(event.message_id, event, wire)

    def adopt_preview(self, event: MessageEvent, ref: str) -> None:
        self._previews.adopt(event.message_id, ref)

    async def _on_lifecycle(self, ev: LifecycleEvent) -> None:
        """A preview nobody finished belongs to a run that ended without an answer: it keeps
        what it shows."""
        message = ev.message
        if message is None or message.platform != self.name:
            return
        preview = self._previews.pop(message.message_id)
        if preview is not None:
            try:
                await preview.finish()
            except AdapterError as exc:
                log.info("mattermost.preview_finish_failed", error=str(exc))
