"""The Matrix platform: a bot user's /sync long poll through mautrix's client API (the
``since`` token kept in the gateway's home, see `state`), invites, intake, typing, media on
demand, and replies through `Outbox`.

Startup never hangs: `start` waits briefly for the first connection attempt, then keeps
retrying in the background while `/readyz` says why (a rejected token is a config error)."""

from __future__ import annotations

import asyncio
import hashlib
import re
from dataclasses import replace
from pathlib import Path

import structlog

from adapters.matrix.api import Method, client, raw
from adapters.matrix.replies import Outbox, Wire
from adapters.matrix.settings import MatrixConfig
from adapters.matrix.state import SyncState
from adapters.matrix.sync import Batch, Syncer
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
    MessageEvent,
    OutboundMessage,
    PermanentAdapterError,
    RetryLater,
    StallWatch,
    StreamSink,
    Supervisor,
    TransientAdapterError,
    TypingIndicator,
    first_of,
    origins,
)

log = structlog.get_logger("hermes.adapters.matrix")
_MXC = re.compile(r"mxc://([A-Za-z0-9.:\[\]-]+)/([A-Za-z0-9_-]+)")


def describe(failures: int, exc: BaseException, wait: float) -> str:
    """`/readyz`'s words for a failed connection attempt."""
    return (
        f"connecting to the homeserver (attempt {failures} failed: "
        f"{type(exc).__name__}: {exc}; next in {wait:.1f} s)"
    )


class MatrixAdapter:
    """One bot user: intake from /sync, replies through `Outbox`."""

    name = "matrix"
    # Timings (seconds); tests shorten them on the class.
    request_timeout = 20.0  # each call but the long poll
    stall_grace = 10.0  # a /sync unanswered this long past its timeouts is restarted
    startup_wait = 5.0
    retry_first, retry_max = 1.0, 60.0
    typing_interval = 5.0
    edit_interval = 1.0

    def __init__(self, host: AdapterHost) -> None:
        self.host = host
        section = self.config
        read = section.sync_timeout_s + self.request_timeout
        self.api = client(section.homeserver, section.access_token, read)
        self.wire = Wire(self.api, self.request_timeout)
        self.outbox = Outbox(self.wire, self.edit_interval, host.remember_preview)
        media = host.config.home_path / "media"
        self.files = Downloader(
            "matrix", media, section.media_max_bytes, origins(section.homeserver)
        )
        self.me: BotIdentity | None = None
        self._device = ""  # the access token's device, which scopes its transaction ids
        # one /sync per bot token in a cluster (always this one on a single process)
        digest = hashlib.sha256(section.access_token.encode()).hexdigest()[:16]
        self.lead = host.leadership(f"matrix-sync:{digest}")
        self.supervisor = Supervisor(
            self.name,
            self._connect_once,
            backoff=Backoff(self.retry_first, self.retry_max),
            describe=describe,
            stall=StallWatch(read + self.stall_grace, event="matrix.sync_restart"),
        )
        self.typing = (
            TypingIndicator(host.bus, self.name, self.send_typing, interval=self.typing_interval)
            if section.typing
            else None
        )

    @property
    def config(self) -> MatrixConfig:
        """This platform's section of the config in force, read at each use (a SIGHUP reload
        changes its access rules, which the invites follow too)."""
        return self.host.config.platforms.section("matrix", MatrixConfig)

    # -- lifecycle ----------------------------------------------------------------------

    async def start(self) -> None:
        """Connect in the background; wait up to `startup_wait` for the first attempt so a
        rejected token fails the start (exit 78) while a network problem does not."""
        self.supervisor.start()
        await self.supervisor.settled(self.startup_wait)
        if self.supervisor.fatal is not None:
            raise self.supervisor.fatal

    async def stop(self) -> None:
        """Stop intake (no more /sync); sending still works."""
        await self.supervisor.stop()
        await self.lead.release()

    async def close(self) -> None:
        if self.typing is not None:
            self.typing.stop_all()
        await self.outbox.close()
        await self.supervisor.stop()
        await self.files.aclose()
        await self.api.api.session.close()

    def health(self) -> Health:
        return self.supervisor.health

    async def _connect_once(self) -> None:
        """whoami, then (leading the bot's /sync in a cluster) sync until it fails."""
        if not self.supervisor.failures:
            self.supervisor.down("connecting to the homeserver")
        me = await self._whoami()
        if not self.lead.leading:
            self.supervisor.ready(f"{me.user_id} sync stand-by: another instance syncs")
            await self.lead.acquire()
        home, section = self.host.config.home_path, self.config
        state = SyncState(home, section.homeserver, me.user_id)
        syncer = Syncer(
            self.api,
            state,
            Batch(self.host, me, self.wire, lambda: self.config),
            section.sync_timeout_s,
        )
        self.supervisor.ready(f"{me.user_id} syncing")
        log.info("matrix.connected", user_id=me.user_id, device_id=self._device)
        sync = asyncio.create_task(syncer.run(self.supervisor.progress), name="adapter:matrix:sync")
        lost = asyncio.create_task(self.lead.lost(), name="adapter:matrix:lead-lost")
        await first_of(sync, lost)
        if sync.done() and not sync.cancelled() and sync.exception() is not None:
            error = sync.exception()
            if isinstance(error, AdapterAuthError):
                raise self._rejected(error) from error
            raise TransientAdapterError(f"sync ended ({error!r})") from error
        await self.lead.release()
        raise RetryLater(0.0)  # another instance syncs now: stand by again

    async def _whoami(self) -> BotIdentity:
        try:
            answer = await raw(self.api, Method.GET, "/_matrix/client/v3/account/whoami")
        except AdapterAuthError as exc:
            raise self._rejected(exc) from exc
        user_id = answer.get("user_id")
        if not isinstance(user_id, str):
            raise PermanentAdapterError("whoami answered without a user_id")
        device = answer.get("device_id")
        self._device = device if isinstance(device, str) else ""
        self.me = BotIdentity(user_id, user_id.partition(":")[0].removeprefix("@"))
        return self.me

    def _rejected(self, exc: AdapterAuthError) -> GiveUp:
        log.error("matrix.token_rejected", error=str(exc))
        return GiveUp(f"token rejected: {exc}")

    # -- delivery ----------------------------------------------------------------------

    async def send(self, message: OutboundMessage) -> None:
        if self.me is None:
            raise TransientAdapterError(
                f"Matrix is not connected yet ({self.supervisor.health.detail})"
            )
        typing = self.typing is not None and bool(message.run_id)
        if self.typing is not None and message.run_id:
            self.typing.stop(message.run_id)
        await self.outbox.send(message)
        if typing:  # a notification lasts its timeout unless withdrawn: not past the answer
            try:
                await self.wire.typing(message.chat_id, self.me.user_id, 0)
            except AdapterError as exc:
                log.debug("matrix.typing_off_failed", room_id=message.chat_id, error=str(exc))

    def stream(self, event: MessageEvent) -> StreamSink | None:
        if not self.config.streaming or event.platform != self.name:
            return None
        return self.outbox.preview(event)

    def adopt_preview(self, event: MessageEvent, ref: str) -> None:
        self.outbox.adopt(event, ref)

    async def send_typing(self, event: MessageEvent) -> None:
        # lasts a little longer than the indicator's interval, so it never flickers off
        ms = int((self.typing_interval + 5) * 1000)
        if self.me is not None:
            await self.wire.typing(event.chat_id, self.me.user_id, ms)

    async def download(self, attachment: Attachment) -> Path:
        """Fetch an attachment into ``<home>/media`` (never at intake) from the homeserver's
        authenticated media API, streamed; over `media_max_bytes` is `PermanentAdapterError`."""
        section = self.config
        self.files.set_cap(section.media_max_bytes)
        match = _MXC.fullmatch(attachment.url)
        if match is None:
            raise PermanentAdapterError(f"not a media URI: {attachment.url[:100]!r}")
        server, media_id = match.groups()
        url = (
            f"{section.homeserver.rstrip('/')}/_matrix/client/v1/media/download/{server}/{media_id}"
        )
        auth = {"Authorization": f"Bearer {section.access_token}"}
        return await self.files.fetch(replace(attachment, url=url), auth)
