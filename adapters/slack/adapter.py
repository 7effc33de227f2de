"""Slack: a slack-bolt `AsyncApp` fed by Socket Mode (default) or by the Events API on the
control server. Either way an event is acked once it is in the inbox: one the store could not
take is not acked (over HTTP: a 503), so Slack delivers it again; at its last retry the user is
told instead."""

from __future__ import annotations

import asyncio
import logging
import re
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import Any

import aiohttp
import structlog
from aiohttp import web
from slack_bolt.adapter.socket_mode.aiohttp import AsyncSocketModeHandler
from slack_bolt.app.async_app import AsyncApp
from slack_bolt.request.async_request import AsyncBoltRequest

from adapters.shims.slack import seed_auth_test, use_socket_url
from adapters.slack.api import SlackWeb, file_downloader
from adapters.slack.http import serve_event
from adapters.slack.inbound import normalize
from adapters.slack.progress import Progress, slack_preview
from adapters.slack.redelivery import LAST_RETRY, Copies
from adapters.slack.replies import post_reply
from adapters.slack.settings import SlackConfig, app_key
from adapters.slack.socket import AckingSocketHandler, take_slot
from adapters.slack.socket import close_socket as _close_socket
from adapters.slack.socket import frame_type as _frame_type
from hermes_gateway.platforms import (
    AdapterAuthError,
    AdapterError,
    AdapterHost,
    Attachment,
    Backoff,
    BotIdentity,
    GiveUp,
    Health,
    Inbound,
    Intake,
    Leadership,
    LifecycleEvent,
    MessageEvent,
    OutboundMessage,
    PreviewBook,
    Recent,
    Replier,
    RetryLater,
    StoreError,
    StreamSink,
    Supervisor,
    TransientAdapterError,
    hold,
)

log = structlog.get_logger("hermes.adapters.slack")
NOT_TAKEN = (
    "I could not take your message just now (my database is not answering, or I am "
    "restarting), so I have not acted on it; please send it again in a moment."
)
START_TIMEOUT_S = 15.0  # auth.test + apps.connections.open + the socket handshake
RETRY_FIRST_S, RETRY_MAX_S = 0.5, 30.0
_PROGRESS_EVENTS = ("processing_start", "response_sent", "processing_complete")


class SlackAdapter:
    name = "slack"
    preview_interval = 1.0  # seconds between edits of a streamed preview

    def __init__(self, host: AdapterHost) -> None:
        self.host = host
        self.intake = Intake(host, self.name)
        self.web: SlackWeb | None = None
        self.app: AsyncApp | None = None
        self.socket: AsyncSocketModeHandler | None = None
        self._hello_on: object | None = None  # the socket session that said hello
        self._me = BotIdentity("")  # from auth.test, before any event can arrive
        self._accepting = False
        self._stopped = False
        # Slack takes at most 10 sockets per app: in a cluster one of the slots is needed
        self.slot: Leadership | None = None
        self._standby = False  # every slot is another instance's: connected for sending only
        if self.config.mode == "socket":
            role = f"slack:{app_key(self.config.app_token)}:socket"
            self.slot = host.leadership(role, slots=self.config.socket_slots)
        self.supervisor = Supervisor(
            self.name,
            self._connect_once,
            backoff=Backoff(RETRY_FIRST_S, RETRY_MAX_S, factor=1.5),
            describe=lambda _n, exc, _wait: (
                f"connecting (last error: {str(exc) or type(exc).__name__})"
            ),
        )
        self._copies = Copies()  # (channel, ts) taken: the mention pair, retried events
        self._threads = Recent()  # (channel, thread_ts) of threads the bot answers in
        self._unstored: set[str] = set()  # event ids left with Slack: not acked
        self._previews: PreviewBook[str, str] = PreviewBook("slack", host.remember_preview)
        self._replier = Replier(self._previews)
        self.files = file_downloader(self.config, host.config.home_path / "media")
        mode = self.config.progress if self.config.typing else "none"
        self._progress = Progress(mode, self.config.progress_reaction)
        host.bus.subscribe(self._on_lifecycle, _PROGRESS_EVENTS, name="slack:progress")
        if self.config.mode == "http":
            host.add_route("POST", self.config.events_path, self._http_events, access="public")

    @property
    def config(self) -> SlackConfig:
        """This platform's section of the config in force, read at each use: a SIGHUP reload
        changes its access rules (`require_mention` included), which this adapter follows too."""
        return self.host.config.platforms.section("slack", SlackConfig)

    # -- lifecycle ----------------------------------------------------------------------

    async def start(self) -> None:
        """Check the tokens (a rejected one raises `AdapterAuthError`: exit 78) and connect;
        network trouble is retried in the background while the gateway serves."""
        self.web = SlackWeb(self.config.bot_token, self.config.api_base)
        self._accepting = True
        self.supervisor.down("connecting")
        self.supervisor.start()
        await self.supervisor.settled(START_TIMEOUT_S + 1)
        if self.supervisor.fatal is not None:
            raise self.supervisor.fatal

    async def _connect_once(self) -> None:
        """Connect, then keep the connection: over a socket the SDK reconnects by itself. In
        a cluster the socket is open only while this instance holds one of the app's socket
        slots; without one it stands by (the bot token checked, replies can go out)."""
        slot = self.slot
        try:
            if slot is not None and not slot.leading:
                assert self.web is not None
                await asyncio.wait_for(self.web.auth_test(), START_TIMEOUT_S)
                await take_slot(slot, self._stand_by)
            await asyncio.wait_for(self._bring_up(), START_TIMEOUT_S)
        except AdapterAuthError as exc:
            log.error("slack.auth_failed", error=str(exc))
            raise GiveUp(str(exc)) from exc
        self.supervisor.ready("connected")
        if slot is None:
            await hold()
            return
        await slot.lost()  # forever on one process
        log.warning("slack.socket_slot_lost")
        await self._close_socket()
        await slot.release()
        raise RetryLater(0.0)

    def _stand_by(self, standing_by: bool) -> None:
        self._standby = standing_by
        if standing_by:
            self.supervisor.ready("socket stand-by: other instances hold Slack's socket slots")

    async def _bring_up(self) -> None:
        assert self.web is not None
        auth = await self.web.auth_test()
        self._me = BotIdentity(str(auth.get("user_id") or ""), bot_id=str(auth.get("bot_id") or ""))
        app = self._build_app(auth)
        if self.config.mode == "socket":
            handler = AckingSocketHandler(
                app,
                app_token=self.config.app_token,
                logger=app.logger,
                ping_interval=self.config.ping_interval_s,
            )
            handler.client.on_message_listeners.append(self._on_frame)
            handler.unstored = self._unstored
            try:
                # our own apps.connections.open: a rejected app token is an error here, where the
                # SDK's connect() would retry it forever
                use_socket_url(handler.client, await self.web.socket_url(self.config.app_token))
                self.socket = handler
                await handler.connect_async()  # type: ignore[no-untyped-call]
            except BaseException:
                self.socket = None
                await _close_socket(handler)
                raise
        self.app = app
        log.info("slack.started", mode=self.config.mode, bot_user_id=auth.get("user_id"))

    def _build_app(self, auth: Any) -> AsyncApp:
        assert self.web is not None
        http = self.config.mode == "http"
        app = AsyncApp(
            client=self.web.client,
            # the listener (intake into the inbox) runs before the ack is sent: an ack before
            # the inbox write loses the event if the process dies or the write fails meanwhile
            process_before_response=True,
            signing_secret=self.config.signing_secret if http else None,
            request_verification_enabled=http,  # Socket Mode needs no signature
            logger=logging.getLogger("hermes.adapters.slack.bolt"),
            name="hermes",
        )
        # reuse our auth.test: bolt would otherwise call it on the first event, and a failure
        # there drops that event
        seed_auth_test(app, auth)
        app.event("message")(self._on_event)
        app.event("app_mention")(self._on_event)
        app.event(re.compile(".*"))(_ack_only)  # other subscribed events: acked, not retried
        return app

    async def stop(self) -> None:
        """Stop intake: close the socket, so Slack keeps new events for the next connection,
        then give its slot to a stand-by."""
        self._accepting = False
        await self.supervisor.stop()
        await self._close_socket()
        if self.slot is not None:
            await self.slot.release()

    async def _close_socket(self) -> None:
        socket, self.socket, self._hello_on = self.socket, None, None
        if socket is not None:
            await _close_socket(socket)

    async def close(self) -> None:
        self._stopped = True
        self._accepting = False
        await self.supervisor.stop()
        self._previews.cancel_all()
        await self.files.aclose()
        await self._close_socket()
        if self.slot is not None:
            await self.slot.release()
        if self.web is not None:
            # runs interrupted by the shutdown end after this: take their reactions off now
            try:
                await asyncio.wait_for(self._progress.clear_all(self.web), 3)
            except TimeoutError:
                log.info("slack.progress_clear_timeout")
            await self.web.close()

    def health(self) -> Health:
        if self._stopped or (self.web is not None and not self._accepting):
            return Health(False, "stopped")
        if not self.supervisor.health.ready:
            return self.supervisor.health
        if self.config.mode == "http":
            return Health(True, "events api")
        if self._standby:
            return self.supervisor.health
        client = self.socket.client if self.socket is not None else None
        session = client.current_session if client is not None else None
        if client is None or session is None or session.closed or client.stale:
            return Health(False, "socket disconnected; reconnecting")
        if self._hello_on is not session:
            return Health(False, "socket connecting (no hello yet)")
        return Health(True, "socket connected")

    # -- intake -------------------------------------------------------------------------

    async def _on_frame(self, message: aiohttp.WSMessage) -> None:
        """Every Socket Mode frame, before the SDK acts on it: tracks hello / disconnect."""
        kind = _frame_type(message.data)
        if kind == "hello":
            self._hello_on = self.socket.client.current_session if self.socket else None
            log.info("slack.socket_hello")
        elif kind == "disconnect":
            self._hello_on = None
            log.info("slack.socket_disconnect_requested")

    async def _on_event(self, body: dict[str, Any], request: AsyncBoltRequest) -> None:
        """A bolt listener: runs before the ack, which it withholds (``_unstored``) when the
        store could not take the event. Nothing a payload holds may escape from here."""
        try:
            if not await self._intake(body.get("event"), _retry_num(request)):
                self._unstored.add(str(body.get("event_id") or ""))
        except Exception:
            log.exception("slack.intake_failed", event_id=body.get("event_id"))

    async def _intake(self, raw: Any, retry: int) -> bool:
        """False when the store could not take the event (it is then not acked), unless this
        was Slack's last try: then its user is told to send it again."""

        def read(per_user: bool) -> Inbound | None:
            inbound = normalize(raw, self._me, per_user=per_user)
            if inbound is None:
                log.debug("slack.ignored", type=_field(raw, "type"), subtype=_field(raw, "subtype"))
            return inbound

        mine: list[tuple[str, str]] = []  # the copy this call lets through, if any
        stored = False  # or otherwise settled (refused, a duplicate): not to be taken again
        try:
            taken = await self.intake.take(read, durable=True, screen=partial(self._screen, mine))
            stored = not taken.keep
        finally:
            for key in mine:
                self._copies.settle(key, stored)
        event = taken.event
        if event is None:
            return True
        if taken.keep:
            if retry < LAST_RETRY:
                return False
            log.error("slack.event_dropped", channel=event.chat_id, ts=event.message_id)
            await self.send(OutboundMessage.to(event, NOT_TAKEN, "notice"))
            return True
        if taken.outcome == "accepted" and event.chat_type == "thread":
            self._threads.add((event.chat_id, event.thread_id))
        return True

    async def _screen(
        self, mine: list[tuple[str, str]], event: MessageEvent
    ) -> MessageEvent | None:
        # the app_mention + message pair and retried deliveries share the ts: one is taken
        key = (event.chat_id, event.message_id)
        if not await self._copies.first(key):
            log.debug("slack.duplicate", channel=event.chat_id, ts=event.message_id)
            return None
        mine.append(key)
        if not event.mentioned and await self._follows_thread(event):
            return replace(event, mentioned=True)
        return event

    async def _follows_thread(self, event: MessageEvent) -> bool:
        """A reply in a thread the bot already answers in needs no mention: known from this
        run, or from the thread's session history (survives restarts)."""
        if not self.config.require_mention or event.chat_type != "thread" or not event.reply_to:
            return False
        if (event.chat_id, event.thread_id) in self._threads:
            return True
        try:
            return bool(await self.host.history(event.session_key))
        except StoreError as exc:  # the database is down: only a mention gets an answer now
            log.warning("slack.thread_unknown", error=str(exc), channel=event.chat_id)
            return False

    async def _http_events(self, request: web.Request) -> web.StreamResponse:
        """The Events API endpoint: the signature and timestamp are checked first (401
        otherwise), then bolt answers url_verification and acks; 503 until started, so Slack
        retries later."""
        app = self.app
        if app is None or not self._accepting:
            return web.json_response({"ok": False, "error": "not_ready"}, status=503)
        return await serve_event(app, request, self.config.signing_secret, self._unstored)

    # -- delivery -----------------------------------------------------------------------

    async def send(self, message: OutboundMessage) -> None:
        """Markdown -> mrkdwn parts under `message_limit`, into the thread; each part retried
        on its own (earlier parts are never sent twice). A streamed preview becomes part 1."""
        if self.web is None:
            raise TransientAdapterError("slack: not started")
        limit = self.config.message_limit
        await post_reply(self.web, self._replier, message, limit, self._me.user_id)

    async def download(self, attachment: Attachment) -> Path:
        """Fetch a file (``url_private``, with the bot token) into ``<home>/media``, never at
        intake; a foreign host or a file over `media_max_bytes` raises `PermanentAdapterError`."""
        bearer = {"Authorization": f"Bearer {self.config.bot_token}"}
        return await self.files.fetch(attachment, bearer)

    def stream(self, event: MessageEvent) -> StreamSink | None:
        if not self.config.streaming or self.web is None:
            return None
        wire = slack_preview(self.web, event, self.config.message_limit, self.preview_interval)
        return self._previews.open(event.message_id, event, wire)

    def adopt_preview(self, event: MessageEvent, ref: str) -> None:
        self._previews.adopt(event.message_id, ref)

    async def _on_lifecycle(self, ev: LifecycleEvent) -> None:
        message, web = ev.message, self.web
        if message is None or message.platform != self.name or web is None or self._stopped:
            return
        if ev.name == "processing_start":
            await self._progress.show(web, ev.run_id, message)
            return
        await self._progress.clear(web, ev.run_id)
        if ev.name == "processing_complete":
            # a preview nobody finished belongs to a run that ended without an answer
            preview = self._previews.pop(message.message_id)
            ts = await preview.finish() if preview is not None else None
            if ts:
                try:
                    await web.delete(message.chat_id, ts)
                except AdapterError as exc:
                    log.info("slack.preview_delete_failed", error=str(exc))


async def _ack_only() -> None:
    return None


def _retry_num(request: AsyncBoltRequest) -> int:
    """Slack's X-Slack-Retry-Num (0: the first delivery); Socket Mode's retry_attempt."""
    given = request.headers.get("x-slack-retry-num") or ["0"]
    value = given[0] if isinstance(given, list | tuple) else str(given)
    return int(value) if value.isdigit() else 0


def _field(raw: Any, key: str) -> str:
    return str(raw.get(key) or "") if isinstance(raw, dict) else ""
