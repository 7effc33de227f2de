"""The Telegram platform: python-telegram-bot 22 driven on the gateway's loop, long polling
(or a webhook on the control server), access rules, delivery, typing and live preview.

Startup never hangs: `start` waits briefly for the first connection attempt, then keeps
retrying in the background while `/readyz` says why (a rejected token is a config error).
"""

from __future__ import annotations

import asyncio
import hmac
from pathlib import Path

import structlog
from aiohttp import web

from adapters.telegram.build import ALLOWED_UPDATES, bot_commands, build_app, build_poller, describe
from adapters.telegram.http import AiohttpRequest
from adapters.telegram.media import file_downloader, locator
from adapters.telegram.normalize import normalize
from adapters.telegram.poller import Poller
from adapters.telegram.sending import Outbox, Sender, call, chat_ref
from adapters.telegram.settings import TelegramConfig
from adapters.telegram.transport import PollMonitor, TokenLock, bounded
from hermes_gateway.platforms import (
    AdapterAuthError,
    AdapterError,
    AdapterHost,
    Attachment,
    Backoff,
    BotIdentity,
    GiveUp,
    Health,
    Intake,
    MessageEvent,
    OutboundMessage,
    PermanentAdapterError,
    RequestError,
    RetryLater,
    StallWatch,
    StreamSink,
    Supervisor,
    TransientAdapterError,
    TypingIndicator,
    first_of,
    hold,
    read_json,
)
from telegram import Update
from telegram.constants import ChatAction
from telegram.error import InvalidToken

log = structlog.get_logger("hermes.adapters.telegram")
SECRET_HEADER = "X-Telegram-Bot-Api-Secret-Token"


class TelegramAdapter:
    """One bot: intake from polling or the webhook, replies through `Outbox`."""

    name = "telegram"
    # Timings (seconds); tests shorten them on the class.
    poll_timeout = 25.0  # getUpdates long-poll wait
    request_timeout = 10.0  # connect/read/write for each Bot API call
    stall_grace = 5.0  # polling unanswered this long past its timeouts is reported stalled
    startup_wait = 5.0  # how long `start` waits for the first connection attempt
    retry_first, retry_max = 1.0, 60.0  # connection backoff
    lock_retry = 10.0  # how often a gateway without the token lock tries again
    watch_interval = 1.0
    typing_interval = 5.0
    edit_interval = 1.0  # live preview: at most one edit per this

    def __init__(self, host: AdapterHost) -> None:
        self.host = host
        self.intake = Intake(host, self.name)
        self.monitor = PollMonitor()
        self.lock = TokenLock(host.config.home_path, self.config.token)
        t = self.request_timeout
        # the bot's calls, and the sends and edits `Sender` makes on it directly
        self.transport = AiohttpRequest(
            connection_pool_size=16, read_timeout=t, write_timeout=t, connect_timeout=t
        )
        self.app = build_app(self.config, self.transport)
        # one poller per bot token in a cluster (always this one on a single process)
        self.lead = host.leadership(f"telegram-poller:{self.config.token.split(':')[0]}")
        self.poller: Poller | None = None
        self._polling: asyncio.Task[None] | None = None
        if self.config.mode == "polling":
            self.poller = build_poller(
                self.app.bot,
                self.monitor,
                self._take,
                poll_timeout=self.poll_timeout,
                request_timeout=self.request_timeout,
                writable=host.writable,
                budget=self.lead.remaining,
            )
        sender = Sender(self.app.bot, self.transport)
        self.outbox = Outbox(sender, self.edit_interval, host.remember_preview)
        media, section = host.config.home_path / "media", self.config
        self.files = file_downloader(media, section.media_max_bytes, section.base_file_url)
        self.me: BotIdentity | None = None
        self._live = False  # polling started or webhook set
        self._accepting = False
        self._lock_warned = False
        self._commands_set = False
        self._standby = False  # waiting for another instance to stop polling this bot
        self.supervisor = Supervisor(
            self.name,
            self._connect_once,
            backoff=Backoff(self.retry_first, self.retry_max),
            describe=describe,
            # no getUpdates started for this long: polling is stuck outside a request
            stall=StallWatch(
                self._stall_after + Poller.backoff_max,
                lambda: 0.0 if self._standby else self.monitor.idle(),
                self.watch_interval,
                "telegram.polling_restart",
            ),
        )
        self.typing = (
            TypingIndicator(host.bus, self.name, self.send_typing, interval=self.typing_interval)
            if self.config.typing
            else None
        )
        if self.config.mode == "webhook":
            host.add_route("POST", self.config.webhook_path, self.webhook, access="public")

    @property
    def config(self) -> TelegramConfig:
        """This platform's section of the config in force, read at each use: a SIGHUP reload
        changes its access rules (`require_mention` included), which this adapter follows too."""
        return self.host.config.platforms.section("telegram", TelegramConfig)

    # -- lifecycle ----------------------------------------------------------------------

    async def start(self) -> None:
        """Connect in the background; wait up to `startup_wait` for the first attempt so a
        rejected token fails the start (exit 78) while a network problem does not."""
        self._accepting = True
        self.supervisor.start()
        await self.supervisor.settled(self.startup_wait)
        if self.supervisor.fatal is not None:
            raise self.supervisor.fatal

    async def stop(self) -> None:
        """Stop intake: no more polling or webhook updates; sending still works."""
        self._accepting = False
        await self.supervisor.stop()  # polling among it
        if self.poller is not None and self._live and self.lead.leading:
            await self.poller.confirm()
        await self.lead.release()  # after the confirm: a stand-by takes over from there
        if self.app.running:
            await bounded(self.app.stop(), 5, "telegram.app_stop")
        self._live = False

    async def close(self) -> None:
        if self.typing is not None:
            self.typing.stop_all()
        await self.outbox.close()
        await self.files.aclose()
        if self.app.running:
            await self.stop()
        await bounded(self.app.shutdown(), 5, "telegram.shutdown")
        if self.poller is not None:
            await self.poller.close()
        await asyncio.to_thread(self.lock.release)

    def health(self) -> Health:
        health = self.supervisor.health
        if health.ready and self.poller is not None and not self._standby:
            problem = self.monitor.problem(self._stall_after)
            if problem is not None:
                return Health(False, problem)
        return health

    @property
    def _stall_after(self) -> float:
        # a healthy long poll answers within poll_timeout (getUpdates' read timeout adds the
        # request timeout to it)
        return self.poll_timeout + self.request_timeout + self.stall_grace

    async def _connect_once(self) -> None:
        """Connect and take updates until polling ends (a webhook: until stopped). In a
        cluster only the instance leading ``telegram-poller:<bot id>`` polls; the others stay
        connected for sending and stand by."""
        if self.poller is not None and not self.lead.leading:
            await self._stand_by()
        if not await asyncio.to_thread(self.lock.acquire):
            await self.lead.release()  # a gateway outside the cluster polls on this host
            (log.debug if self._lock_warned else log.error)(
                "telegram.token_in_use", lock=str(self.lock.path)
            )
            self._lock_warned = True
            in_use = f"another gateway on this host uses this bot token ({self.lock.path})"
            raise RetryLater(self.lock_retry, in_use)
        if not self.supervisor.failures:  # else the last failure stays in /readyz meanwhile
            self.supervisor.down("connecting to Telegram")
        me = await self._connect()
        self._live = True
        self.supervisor.ready(f"@{me.username} {self.config.mode} live")
        log.info("telegram.connected", bot=me.username, mode=self.config.mode)
        if self.poller is None:
            await hold()
        else:
            await self._poll(self.poller)

    async def _connect(self) -> BotIdentity:
        try:
            return await self._bring_up()
        except AdapterAuthError as exc:
            raise self._rejected(exc) from exc

    async def _stand_by(self) -> None:
        """Connected for sending, wait until this instance leads polling; the poller then
        starts from the offset Telegram kept (what the last leader confirmed)."""
        me = await self._connect()
        self._standby = True
        self.supervisor.ready(f"@{me.username} polling stand-by: another instance polls")
        log.info("telegram.poller_standby", bot=me.username)
        try:
            await self.lead.acquire()
        finally:
            self._standby = False
        assert self.poller is not None
        self.poller.forget_offset()
        self.monitor.reset()
        log.info("telegram.poller_leading", bot=me.username)

    async def _bring_up(self) -> BotIdentity:
        try:
            await self.app.initialize()  # getMe
            self.me = me = BotIdentity(str(self.app.bot.id), self.app.bot.username)
            await self._register_commands()
            if not self.app.running:
                await self.app.start()
            await self._go_live()
            return me
        except InvalidToken as exc:  # its text quotes the token: keep that out of logs
            raise AdapterAuthError(
                "platforms.telegram.token: Telegram rejected the bot token (401 Unauthorized)"
            ) from exc

    async def _go_live(self) -> None:
        if self.poller is None:
            ok = await call(
                lambda: self.app.bot.set_webhook(
                    self.config.webhook_url,
                    secret_token=self.config.webhook_secret,
                    allowed_updates=ALLOWED_UPDATES,
                )
            )
            if not ok:
                raise PermanentAdapterError("setWebhook returned false")
            return
        # a webhook left set (by an earlier deployment) makes every getUpdates a 409
        await call(lambda: self.app.bot.delete_webhook())
        self.monitor.reset()

    async def _poll(self, poller: Poller) -> None:
        """Run the polling loop until it ends or leading is lost; its end (a bug, a cancel)
        is a failure, a lost lead a return to standing by."""
        polling = self._polling = asyncio.create_task(poller.run(), name="adapter:telegram:polling")
        lost = asyncio.create_task(self.lead.lost(), name="adapter:telegram:lead-lost")
        await first_of(polling, lost)
        if not polling.cancelled() or lost.cancelled():
            error = None if polling.cancelled() else polling.exception()
        else:  # another instance polls now: this one must not, and stands by again
            await asyncio.to_thread(self.lock.release)
            await self.lead.release()
            raise RetryLater(0.0)
        if isinstance(error, AdapterAuthError):  # revoked while running: nothing to retry
            self._live = False
            raise self._rejected(error) from error
        log.error("telegram.polling_restart", died=True, error=repr(error))
        raise TransientAdapterError(f"polling ended ({error!r})")

    def _rejected(self, exc: AdapterAuthError) -> GiveUp:
        log.error("telegram.token_rejected", error=str(exc))
        return GiveUp(f"token rejected: {exc}")

    async def _register_commands(self) -> None:
        if self._commands_set:
            return
        commands = bot_commands()
        try:
            await call(lambda: self.app.bot.set_my_commands(commands))
            self._commands_set = True
        except AdapterError as exc:  # the commands still work, they are just not suggested
            log.warning("telegram.set_commands_failed", error=str(exc))

    # -- intake ------------------------------------------------------------------------

    async def webhook(self, request: web.Request) -> web.Response:
        given = request.headers.get(SECRET_HEADER, "")
        if not hmac.compare_digest(given.encode(), self.config.webhook_secret.encode()):
            # a stranger's request: one sampled line from the control server, not one each
            raise RequestError(403, "wrong webhook secret", "forbidden")
        if not self._accepting or not self.app.running:
            return web.Response(status=503, text="not ready")  # Telegram delivers it later
        body = await read_json(request)  # a RequestError 400 when not JSON or nested too deep
        try:
            update = Update.de_json(body, self.app.bot)
        except Exception as exc:  # junk must not make Telegram redeliver it forever
            log.warning("telegram.update_unparseable", error=repr(exc)[:200])
            return web.Response(text="ignored")
        if not await self._take(update):  # answer 200 (Telegram forgets it) once it is stored
            return web.Response(status=503, text="store unavailable")
        return web.Response(text="ok")

    async def _take(self, update: Update) -> bool:  # False: not stored, Telegram keeps it
        try:
            return await self._handle(update)
        except Exception:  # one bad update must never stop the next
            log.exception("telegram.update_failed", update_id=update.update_id)
            return True

    async def _handle(self, update: Update) -> bool:
        me = self.me
        if me is None:
            return True
        taken = await self.intake.take(
            lambda per_user: normalize(update, me, per_user=per_user), durable=True
        )
        return not taken.keep

    # -- delivery ----------------------------------------------------------------------

    async def send(self, message: OutboundMessage) -> None:
        if self.me is None:
            raise TransientAdapterError(
                f"Telegram is not connected yet ({self.supervisor.health.detail})"
            )
        if self.typing is not None and message.run_id:
            self.typing.stop(message.run_id)  # no "typing..." after the answer
        await self.outbox.send(message)

    def stream(self, event: MessageEvent) -> StreamSink | None:
        if not self.config.streaming or event.platform != self.name:
            return None
        return self.outbox.preview(event)

    def adopt_preview(self, event: MessageEvent, ref: str) -> None:
        self.outbox.adopt(event, ref)

    async def send_typing(self, event: MessageEvent) -> None:
        thread = int(event.thread_id) if event.thread_id and event.thread_id.isdigit() else None
        await call(
            lambda: self.app.bot.send_chat_action(
                chat_ref(event.chat_id), ChatAction.TYPING, message_thread_id=thread
            )
        )

    async def download(self, attachment: Attachment) -> Path:
        """Fetch an attachment into ``<home>/media`` (never at intake), streamed; a file over
        `media_max_bytes` (as announced, as getFile says, or as it arrives) raises
        `PermanentAdapterError`."""
        self.files.set_cap(self.config.media_max_bytes)  # the cap in force: a reload may change it
        return await self.files.fetch(attachment, locate=locator(self.app.bot))
