"""Signal through a signal-cli daemon (``daemon --http``): receive by its event stream (SSE,
resumed from the last event taken), send by JSON-RPC calls. An event is taken (the cursor
moves past it) only once its message is in the inbox, so a crash or a daemon restart loses
nothing; the inbox's key (sender, timestamp) folds what is offered twice."""

from __future__ import annotations

import asyncio
import hashlib
from pathlib import Path
from typing import Any

import structlog

from adapters.signal import media
from adapters.signal.inbound import Me, evidence, normalize, target
from adapters.signal.ledger import Ledger
from adapters.signal.progress import Progress
from adapters.signal.replies import SentCheck, SignalReply, split
from adapters.signal.rpc import Daemon, RpcError
from adapters.signal.settings import SignalConfig
from adapters.signal.stream import Event, envelope, events
from hermes_gateway.platforms import (
    AdapterAuthError,
    AdapterError,
    AdapterHost,
    Attachment,
    Backoff,
    GiveUp,
    Health,
    Inbound,
    Intake,
    LifecycleEvent,
    MessageEvent,
    OutboundMessage,
    PreviewBook,
    Replier,
    StreamSink,
    Supervisor,
    TransientAdapterError,
    TypingIndicator,
    first_of,
)

log = structlog.get_logger("hermes.adapters.signal")
START_TIMEOUT_S = 10.0
RETRY_FIRST_S, RETRY_MAX_S = 0.5, 15.0
CHECK_EVERY_S = 10.0  # /api/v1/check while the stream is quiet: a hung daemon is noticed
_PROGRESS_EVENTS = ("processing_start", "response_sent", "processing_complete")


class SignalAdapter:
    name = "signal"
    typing_interval = 10.0  # Signal shows "typing" for 15 s after each indicator

    def __init__(self, host: AdapterHost) -> None:
        self.host = host
        config = self.config
        self.intake = Intake(host, self.name)
        self.daemon = Daemon(config.daemon_url, config.account, config.request_timeout_s)
        self.ledger = Ledger(_ledger_path(host.config.home_path, config.account))
        self.check = SentCheck(self.daemon, self.ledger, config.sent_check_wait_s)
        self.me = Me(config.account)
        self._replier: Replier[str, str] = Replier(PreviewBook("signal", host.remember_preview))
        self._progress = Progress(self.daemon, self.ledger, config.progress_reaction)
        self._stopped = False
        # one instance of a cluster reads the account's stream (signal-cli has one per account)
        self.lease = host.leadership(f"signal:{config.account}")
        self.supervisor = Supervisor(
            self.name,
            self._connect_once,
            backoff=Backoff(RETRY_FIRST_S, RETRY_MAX_S, factor=1.5),
            describe=lambda _n, exc, _w: f"daemon unreachable ({str(exc) or type(exc).__name__})",
        )
        if config.typing:
            TypingIndicator(host.bus, self.name, self.send_typing, interval=self.typing_interval)
            host.bus.subscribe(self._on_lifecycle, _PROGRESS_EVENTS, name="signal:progress")

    @property
    def config(self) -> SignalConfig:
        """Read at each use: a SIGHUP reload changes the access rules, which this follows."""
        return self.host.config.platforms.section("signal", SignalConfig)

    # -- lifecycle ----------------------------------------------------------------------

    async def start(self) -> None:
        """Connect in the background (the daemon down is retried while the gateway serves);
        an account the daemon does not have is fatal (exit 78)."""
        await self.ledger.load()
        self.supervisor.down("connecting")
        self.supervisor.start()
        await self.supervisor.settled(START_TIMEOUT_S)
        if self.supervisor.fatal is not None:
            raise self.supervisor.fatal

    async def _connect_once(self) -> None:
        if not self.lease.leading:
            # replies still go out from here: ready, though the stream is another's
            self.supervisor.ready("stand-by: another instance reads the Signal stream")
            await self.lease.acquire()
        self.me = await self._identify()
        stream = asyncio.ensure_future(self._read())
        watch = asyncio.ensure_future(self._watch())
        for task in await first_of(stream, watch):
            task.result()

    async def _identify(self) -> Me:
        """The account's ACI, so mentions by uuid are recognized; an account the daemon does
        not serve is a configuration error no retry fixes."""
        account = self.config.account
        try:
            listed = await self.daemon.call("listAccounts")
        except RpcError as exc:  # an older daemon without listAccounts: the number suffices
            log.info("signal.accounts_unlisted", error=str(exc))
            return Me(account)
        for item in listed if isinstance(listed, list) else []:
            if isinstance(item, dict) and item.get("number") == account:
                uuid = item.get("uuid") or item.get("aci") or ""
                return Me(account, uuid if isinstance(uuid, str) else "")
        error = AdapterAuthError(
            f"platforms.signal.account: {account} is not registered or linked on the daemon"
        )
        log.error("signal.account_unknown", account=account)
        raise GiveUp(str(error)) from error

    async def _watch(self) -> None:
        """Ends (raising) when the daemon stops answering its health check twice in a row,
        or when this instance stops leading."""
        lost = asyncio.ensure_future(self.lease.lost())
        misses = 0
        try:
            while misses < 2:
                done, _ = await asyncio.wait({lost}, timeout=CHECK_EVERY_S)
                if done:
                    raise TransientAdapterError("signal: this instance no longer leads")
                misses = 0 if await self.daemon.check() else misses + 1
        finally:
            lost.cancel()
        raise TransientAdapterError("signal-cli daemon: /api/v1/check is failing")

    async def _read(self) -> None:
        def opened() -> None:
            self.supervisor.ready("connected")
            log.info(
                "signal.connected", account=self.config.account, resumed=bool(self.ledger.cursor)
            )

        async for event in events(self.daemon, self.ledger.cursor, opened):
            await self._take(event)
            self.supervisor.progress()

    async def stop(self) -> None:
        await self.supervisor.stop()
        await self.lease.release()

    async def close(self) -> None:
        self._stopped = True
        await self.supervisor.stop()
        await self.lease.release()
        try:
            await asyncio.wait_for(self._progress.clear_all(), 3)
        except TimeoutError:
            log.info("signal.progress_clear_timeout")
        await self.daemon.close()

    def health(self) -> Health:
        if self._stopped:
            return Health(False, "stopped")
        return self.supervisor.health

    # -- intake -------------------------------------------------------------------------

    async def _take(self, event: Event) -> None:
        """One stream event: its evidence of our sends noted, its message put in the inbox
        (waiting while the store cannot write), then the cursor moved past it. Nothing a
        payload holds may escape from here."""
        raw = envelope(event.data)
        if raw is None:
            log.info("signal.event_skipped", kind=event.kind, id=event.id)
        else:
            try:
                for seen in evidence(raw):
                    self.ledger.note_seen(seen)
                await self._submit(raw)
            except (AdapterError, asyncio.CancelledError):
                raise
            except Exception:
                log.exception("signal.intake_failed", id=event.id)
        self.ledger.advance(event.id)
        await self.ledger.save()

    async def _submit(self, raw: Any) -> None:
        def read(per_user: bool) -> Inbound | None:
            return normalize(raw, self.me, per_user=per_user)

        while (taken := await self.intake.take(read, durable=True)).keep:
            if taken.outcome == "closed":  # shutting down: the cursor stays before it
                raise TransientAdapterError("signal: the gateway is shutting down")
            log.warning("signal.store_unavailable")  # the cursor stays: wait, then again
            await self.host.writable()

    # -- delivery -----------------------------------------------------------------------

    async def send(self, message: OutboundMessage) -> None:
        """Markdown split at `message_limit`, each part one ``send`` (the first quoting the
        message answered), files as attachments after; a part in doubt is asked after."""
        parts = split(message.text, self.config.message_limit) if message.text.strip() else []
        wire = SignalReply(self.daemon, self.ledger, self.check, message)
        await self._replier.send(message, parts, wire)

    async def download(self, attachment: Attachment) -> Path:
        """The attachment through ``getAttachment`` into ``<home>/media``, when a tool asks."""
        folder = self.host.config.home_path / "media"
        return await media.fetch(self.daemon, attachment, folder, self.config.media_max_bytes)

    def stream(self, event: MessageEvent) -> StreamSink | None:
        return None  # no live preview: one final message, split at the limit

    async def send_typing(self, event: MessageEvent) -> None:
        await self.daemon.call("sendTyping", target(event.chat_id))

    async def _on_lifecycle(self, ev: LifecycleEvent) -> None:
        message = ev.message
        if message is None or message.platform != self.name or self._stopped:
            return
        if ev.name == "processing_start":
            await self._progress.show(ev.run_id, message)
        else:
            await self._progress.clear(ev.run_id)


def _ledger_path(home: Path, account: str) -> Path:
    name = hashlib.sha256(account.encode()).hexdigest()[:16]
    return home / "signal" / f"{name}.json"
