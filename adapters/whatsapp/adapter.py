"""WhatsApp through Meta's Cloud API: Meta posts every message and status to the webhook on the
control port (signed with the app secret), the gateway answers through the Graph API. A
delivery is answered 200 only once its messages are in the inbox (its wamid is the inbox's
unique key, so Meta's repeats fold); otherwise 503, and Meta delivers it again."""

from __future__ import annotations

import asyncio
import time
from dataclasses import replace
from functools import partial
from pathlib import Path

import structlog
from aiohttp import web

from adapters.whatsapp.graph import Graph, WindowClosedError
from adapters.whatsapp.inbound import PROVES_SENT, Delivery, Status, normalize, parse_delivery
from adapters.whatsapp.ledger import Ledger
from adapters.whatsapp.render import split_whatsapp
from adapters.whatsapp.replies import ChatReply, Proofs, send_template
from adapters.whatsapp.settings import WhatsAppConfig
from adapters.whatsapp.webhook import challenge, signed_body
from hermes_gateway.platforms import (
    AdapterAuthError,
    AdapterError,
    AdapterHost,
    Attachment,
    Backoff,
    Downloader,
    GiveUp,
    Health,
    Inbound,
    Intake,
    MessageEvent,
    OutboundMessage,
    PermanentAdapterError,
    PreviewBook,
    Replier,
    RetryLater,
    StreamSink,
    Supervisor,
    TransientAdapterError,
    TypingIndicator,
    loads,
    origins,
    with_retry,
)

log = structlog.get_logger("hermes.adapters.whatsapp")
WINDOW_S = 24 * 3600.0  # the customer-service window: free-form messages this long after
START_TIMEOUT_S = 15.0
RECHECK_S = 30.0  # a rejected token is checked again this often (an operator may renew it)
TYPING_EVERY_S = 20.0  # WhatsApp shows the indicator 25 s at most, or until the reply


class WhatsAppAdapter:
    name = "whatsapp"

    def __init__(self, host: AdapterHost) -> None:
        self.host = host
        self.intake = Intake(host, self.name)
        config = self.config
        self.graph: Graph | None = None
        ledger_path = host.config.home_path / "whatsapp" / "ledger.sqlite3"
        self.ledger = Ledger(ledger_path, config.status_keep_s)
        self.proofs = Proofs(self.ledger, config.doubt_wait_s)
        self._replier: Replier[str, str] = Replier(PreviewBook(self.name))
        self.files = Downloader(
            self.name,
            host.config.home_path / "media",
            config.media_max_bytes,
            origins(config.api_base, *config.media_hosts),
        )
        self._accepting = False
        self._stopped = False
        self._rejected = ""  # why Graph refused the token mid-run ("" while it is taken)
        self._refused = asyncio.Event()  # set when a call finds the token refused
        self._ever_ready = False
        self.supervisor = Supervisor(
            self.name, self._check_once, backoff=Backoff(0.5, 30.0, factor=1.5)
        )
        self.typing: TypingIndicator | None = None
        if config.typing or config.read_receipts:
            # the read receipt and the typing indicator are one Graph call
            self.typing = TypingIndicator(
                host.bus, self.name, self._mark_read, interval=TYPING_EVERY_S, first_after=0.0
            )
        path = config.webhook_path
        host.add_route("GET", path, self._verify, access="public")
        host.add_route("POST", path, self._deliveries, access="public")

    @property
    def config(self) -> WhatsAppConfig:
        """This platform's section of the config in force, read at each use (a reload)."""
        return self.host.config.platforms.section("whatsapp", WhatsAppConfig)

    # -- lifecycle ----------------------------------------------------------------------

    async def start(self) -> None:
        """Check the token against the phone number (a rejected one raises
        `AdapterAuthError`: exit 78); an unreachable Graph is retried in the background."""
        config = self.config
        self.graph = Graph(
            config.api_base, config.api_version, config.phone_number_id, config.access_token
        )
        await self.ledger.open()
        self._accepting = True
        self.supervisor.down("checking the access token")
        self.supervisor.start()
        await self.supervisor.settled(START_TIMEOUT_S + 1)
        if self.supervisor.fatal is not None:
            raise self.supervisor.fatal

    async def _check_once(self) -> None:
        """GET /{phone-number-id}: the token works for the number. Webhooks need no
        connection of ours, so once checked this waits until a send finds the token refused."""
        assert self.graph is not None
        try:
            number = await self.graph.phone_number()
        except AdapterAuthError as exc:
            log.error("whatsapp.token_rejected", error=str(exc))
            if not self._ever_ready:
                raise GiveUp(str(exc)) from exc
            raise RetryLater(RECHECK_S, token_rejected(str(exc))) from exc
        self._rejected = ""
        self._ever_ready = True
        name = str(number.get("verified_name") or number.get("display_phone_number") or "")
        self.supervisor.ready(f"webhook at {self.config.webhook_path}; number {name}".strip())
        log.info("whatsapp.started", number=name, webhook=self.config.webhook_path)
        self._refused.clear()
        await self._refused.wait()
        raise RetryLater(RECHECK_S, token_rejected(self._rejected))

    def _token_refused(self, exc: AdapterAuthError) -> None:
        """A send found the token refused (expired, revoked): readiness says so at once."""
        log.error("whatsapp.token_rejected", error=str(exc))
        self._rejected = str(exc)
        self.supervisor.down(token_rejected(str(exc)))
        self._refused.set()

    async def stop(self) -> None:
        """Stop intake: deliveries get a 503 from now on, so Meta keeps them for later."""
        self._accepting = False
        await self.supervisor.stop()

    async def close(self) -> None:
        self._stopped = True
        self._accepting = False
        if self.typing is not None:
            self.typing.stop_all()
        await self.supervisor.stop()
        await self.files.aclose()
        if self.graph is not None:
            await self.graph.aclose()

    def health(self) -> Health:
        if self._stopped or (self.graph is not None and not self._accepting):
            return Health(False, "stopped")
        return self.supervisor.health

    # -- the webhook --------------------------------------------------------------------

    async def _verify(self, request: web.Request) -> web.StreamResponse:
        """Meta's subscription check when the webhook URL is saved in the app dashboard."""
        response = challenge(request, self.config.verify_token)
        log.info("whatsapp.webhook_verified")
        return response

    async def _deliveries(self, request: web.Request) -> web.StreamResponse:
        """One signed delivery: statuses recorded, messages put in the inbox, then 200. A 503
        (not started, the store cannot write) has Meta deliver it again later."""
        if not self._accepting:
            return web.json_response({"error": "not_ready"}, status=503)
        body = await signed_body(request, self.config.app_secret)  # 401 before any parsing
        delivery = parse_delivery(loads(body), self.config.phone_number_id)
        if delivery.foreign:
            log.info("whatsapp.other_number_skipped", changes=delivery.foreign)
        for error in delivery.errors:
            log.warning("whatsapp.webhook_error", error=error)
        await self._statuses(delivery.statuses)
        if not await self._messages(delivery):
            return web.json_response({"error": "not_stored"}, status=503)
        return web.Response(text="ok")

    async def _statuses(self, statuses: tuple[Status, ...]) -> None:
        """The keys of the parts Meta took, durable before the 200 (a part in doubt after a
        crash is looked up there); a failed delivery is logged with Meta's reason."""
        proven = [(s.key, s.wamid) for s in statuses if s.key and s.status in PROVES_SENT]
        await self.ledger.sent(proven)
        self.proofs.arrived([key for key, _ in proven])
        for status in statuses:
            if status.status == "failed":
                log.error(
                    "whatsapp.delivery_failed",
                    to=status.recipient,
                    message_id=status.wamid,
                    error=status.error,
                )

    async def _messages(self, delivery: Delivery) -> bool:
        """Every message of the delivery submitted; False when one was not taken (kept). When
        its sender wrote is kept first, so the reply (which may come at once) knows the window."""
        kept = False
        for message, profile in delivery.messages:
            inbound = normalize(message, profile)
            if inbound is None:
                continue
            event = inbound.event
            await self.ledger.heard_from(event.chat_id, _sent_at(message.get("timestamp")))
            taken = await self.intake.take(partial(_given, inbound), durable=True)
            if taken.keep:
                kept = True
                log.warning("whatsapp.message_not_taken", message_id=event.message_id)
        return not kept

    # -- delivery -----------------------------------------------------------------------

    async def send(self, message: OutboundMessage) -> None:
        """The reply's parts under `message_limit`, each once; outside the 24-hour window
        the configured template goes instead (or a log line says why nothing could)."""
        graph = self.graph
        if graph is None:
            raise TransientAdapterError("whatsapp: not started")
        parts = split_whatsapp(message.text, self.config.message_limit)
        try:
            if await self._window_closed(message.chat_id):
                raise WindowClosedError("more than 24 hours since the user last wrote")
            await self._replier.send(message, parts, ChatReply(graph, self.proofs, message))
        except WindowClosedError as exc:
            await self._outside_window(graph, message, str(exc))
        except AdapterAuthError as exc:
            self._token_refused(exc)
            raise

    async def _window_closed(self, chat: str) -> bool:
        last = await self.ledger.last_heard(chat)
        return last is not None and time.time() - last > WINDOW_S

    async def _outside_window(self, graph: Graph, message: OutboundMessage, why: str) -> None:
        """Only a template may reach a user who has not written for 24 hours: the configured
        one is sent, and either way the reply is reported as not delivered."""
        template = self.config.template
        if not template.name:
            log.error(
                "whatsapp.window_closed",
                chat_id=message.chat_id,
                detail=why,
                hint="no template configured (platforms.whatsapp.template.name): not sent",
            )
            raise PermanentAdapterError(f"whatsapp: window closed, no template: {why}")
        await send_template(graph, message.chat_id, template.name, template.language)
        log.warning(
            "whatsapp.window_closed", chat_id=message.chat_id, detail=why, template=template.name
        )
        raise PermanentAdapterError(f"whatsapp: window closed; template {template.name} sent")

    async def download(self, attachment: Attachment) -> Path:
        """The media behind ``attachment`` (GET /{media-id} for its url, then the url with the
        bearer token), size-bounded by `media_max_bytes`, only when a tool asks for it."""
        self.files.set_cap(self.config.media_max_bytes)
        bearer = {"Authorization": f"Bearer {self.config.access_token}"}
        return await self.files.fetch(attachment, bearer, locate=self._locate)

    async def _locate(self, attachment: Attachment) -> Attachment:
        graph = self.graph
        if graph is None:
            raise TransientAdapterError("whatsapp: not started")
        media = await with_retry(lambda: graph.media(attachment.file_id), what="whatsapp.media")
        url, size = media.get("url"), media.get("file_size")
        if not isinstance(url, str) or not url:
            raise PermanentAdapterError(f"WhatsApp has no download for {attachment.name}")
        return replace(attachment, url=url, size=size if isinstance(size, int) else 0)

    def stream(self, event: MessageEvent) -> StreamSink | None:
        return None  # WhatsApp cannot edit a message: one final answer, no live preview

    async def _mark_read(self, event: MessageEvent) -> None:
        """Blue ticks on the message being answered, and the typing indicator if enabled."""
        graph = self.graph
        if graph is None or self._stopped:
            return
        try:
            await graph.mark_read(event.message_id, typing=self.config.typing)
        except AdapterError as exc:
            log.info("whatsapp.mark_read_failed", error=str(exc))


def token_rejected(error: str) -> str:
    return f"access token rejected ({error}); renew platforms.whatsapp.access_token"


def _given(inbound: Inbound, _per_user: bool) -> Inbound:
    """The intake's read step for a message already read (every WhatsApp chat is one to one:
    the per-user setting changes nothing)."""
    return inbound


def _sent_at(stamp: object) -> float:
    """A message's own time (Unix seconds, as a string), or now when it has none."""
    if isinstance(stamp, str) and stamp.isdigit():
        return float(stamp)
    return time.time()
