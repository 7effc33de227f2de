"""The Discord platform: a discord.py client on the gateway's loop, kept connected by the core's
`Supervisor`. Messages and slash commands come in through `inbound`, replies, previews and
interaction answers go out through `outbound`; `/readyz` follows READY/RESUMED/disconnect."""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import replace
from pathlib import Path
from typing import Any

import aiohttp
import structlog

import discord
from adapters.discord.catchup import CatchUp
from adapters.discord.cdn import CdnLinks
from adapters.discord.client import Endpoints, HermesClient, point_at, restore
from adapters.discord.inbound import command_event, looks_content_less, message_event
from adapters.discord.interactions import reply_context
from adapters.discord.outbound import DiscordOutbox, snowflake
from adapters.discord.settings import DiscordConfig
from adapters.discord.shards import Fleet, split
from hermes_gateway.platforms import (
    AdapterAuthError,
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
    RetryLater,
    StreamSink,
    Supervisor,
    TransientAdapterError,
    TypingIndicator,
    origins,
)

log = structlog.get_logger("hermes.adapters.discord")

TOKEN_REJECTED = "platforms.discord.token: Discord rejected the bot token (401 Unauthorized)"
CONTENT_HINT = (
    "guild messages arrive without their text: enable the MESSAGE CONTENT intent for this bot "
    "in the Discord Developer Portal (Bot > Privileged Gateway Intents); until then only DMs "
    "and messages that mention the bot can be answered"
)
_NETWORK = (aiohttp.ClientError, OSError, TimeoutError, discord.HTTPException)
CDN_HOSTS = ("https://cdn.discordapp.com", "https://media.discordapp.net")


class DiscordAdapter:
    name = "discord"
    login_timeout_s = 30.0
    restart_delay_s = 1.0  # doubles after each crash without a READY in between, up to the cap
    restart_delay_max_s = 60.0

    def __init__(self, host: AdapterHost) -> None:
        self.host = host
        self.intake = Intake(host, self.name)
        self.outbox = DiscordOutbox(self._rest_client, host.remember_preview)
        self.downloader = Downloader(
            self.name,
            host.config.home_path / "media",
            self.config.media_max_bytes,
            origins(*CDN_HOSTS, self.config.cdn_base),
        )
        self.links = CdnLinks(self.downloader, self._rest_client)
        self.indicator = (
            TypingIndicator(host.bus, self.name, self._send_typing) if self.config.typing else None
        )
        self.client: HermesClient | None = None
        self.catchup = CatchUp()
        self.disconnects = 0
        self.sessions = 0  # READYs seen: after the first, missed messages are fetched
        self._logged_in = False
        self._intake = False
        self._stopping = False
        self._message_content = True
        self._warned_content = False
        self._synced = False
        self.supervisor = Supervisor(
            self.name,
            self._connect_once,
            backoff=Backoff(self.restart_delay_s, self.restart_delay_max_s),
            describe=lambda _n, exc, _wait: f"not connected ({exc!r}); retrying",
        )
        self._side_tasks: set[asyncio.Task[Any]] = set()
        self._saved_endpoints: Endpoints | None = None
        # sharded or in a cluster: a client per shard held, `client` only logs in and sends
        self.fleet: Fleet | None = None
        self._split = False  # whether to shard was decided (after the first login)

    @property
    def config(self) -> DiscordConfig:
        """This platform's section of the config in force, read at each use: a SIGHUP reload
        changes its access rules (`require_mention` included), which this adapter follows too."""
        return self.host.config.platforms.section("discord", DiscordConfig)

    # -- lifecycle ----------------------------------------------------------------------------

    async def start(self) -> None:
        """Log in (a rejected token raises `AdapterAuthError`: exit 78), then connect in the
        background; network failures are retried there while the gateway serves /healthz."""
        self._saved_endpoints = point_at(self.config.api_base, self.config.gateway_url)
        self._stopping, self._intake = False, True
        self.supervisor.down("logging in")
        first_delay = 0.0
        try:
            await self._login(self._new_client())
        except discord.LoginFailure as exc:
            await self._discard_client()
            raise AdapterAuthError(TOKEN_REJECTED) from exc
        except _NETWORK as exc:
            log.warning("discord.login_failed", error=repr(exc), retrying=True)
            self.supervisor.down(f"login failed ({exc!r}); retrying")
            await self._discard_client()
            first_delay = self.restart_delay_s
        self.supervisor.start(first_delay)

    async def stop(self) -> None:
        """Stop intake; replies still in flight during the drain can go out until `close`."""
        self._intake = False
        if self.fleet is not None:
            await self.fleet.stop()  # the other instances take its shards over at once
        self.supervisor.down("stopped")
        if self.indicator is not None:
            self.indicator.stop_all()

    async def close(self) -> None:
        self._stopping, self._intake = True, False
        await self.outbox.close()
        await self.downloader.aclose()
        if self.client is not None:
            await self.client.close()
        await self.supervisor.stop()
        for task in list(self._side_tasks):
            task.cancel()
        if self._saved_endpoints is not None:
            restore(self._saved_endpoints)
            self._saved_endpoints = None

    def health(self) -> Health:
        return self.supervisor.health

    # -- one connection, kept up by the supervisor --------------------------------------------

    async def _connect_once(self) -> None:
        client = self.client or self._new_client()
        outcome = await self._run_client(client)
        if self._stopping:
            return
        if outcome == "fatal":
            raise GiveUp(self.supervisor.health.detail)
        await self._discard_client()
        if outcome == "retry_now":
            raise RetryLater(0)

    async def _run_client(self, client: HermesClient) -> str:
        """Log in if needed and run the gateway connection until it ends; how it ended."""
        try:
            if not self._logged_in:
                await self._login(client)
            if not self._split:
                self.fleet, self._split = await split(self, client), True
            self._sync_commands(client)
            if self.fleet is not None:
                await self.fleet.run()
            else:
                await client.connect(reconnect=True)
            if not self._stopping:
                log.warning("discord.client_exited")
        except GiveUp as exc:
            self.supervisor.down(exc.detail)
            return "fatal"
        except discord.LoginFailure:
            log.error("discord.token_rejected", hint=TOKEN_REJECTED)
            self.supervisor.down("the bot token was rejected")
            return "fatal"
        except discord.PrivilegedIntentsRequired:
            if not self.content_refused():
                self.supervisor.down("gateway refused the intents")
                return "fatal"
            return "retry_now"
        except discord.ConnectionClosed as exc:
            log.warning("discord.connection_closed", code=exc.code, reason=exc.reason)
            if exc.code == 4004:
                self.supervisor.down("the bot token was rejected")
                return "fatal"
            self.supervisor.down(f"closed by Discord ({exc.code}); restarting")
            return "restart"
        except Exception as exc:
            log.warning("discord.client_failed", error=repr(exc))
            self.supervisor.down(f"not connected ({exc!r}); retrying")
            return "restart"
        self.supervisor.down("client stopped; restarting")
        return "restart"

    async def _login(self, client: HermesClient) -> None:
        await asyncio.wait_for(client.login(self.config.token), self.login_timeout_s)
        self._logged_in = True
        self.supervisor.down("connecting to the gateway")
        if client.user is not None:
            log.info("discord.logged_in", user=client.user.name, user_id=client.user.id)

    def _new_client(self) -> HermesClient:
        self.client = HermesClient(self, self.config, message_content=self._message_content)
        return self.client

    async def _discard_client(self) -> None:
        client, self.client, self._logged_in = self.client, None, False
        if client is not None:
            with contextlib.suppress(Exception):
                await client.close()

    def _sync_commands(self, client: HermesClient) -> None:
        if self.config.sync_commands and not self._synced:
            self._synced = True
            self._spawn(self._sync(client), "adapter:discord:sync")

    async def _sync(self, client: HermesClient) -> None:
        try:
            synced = await client.tree.sync()
            log.info("discord.commands_synced", commands=sorted(c.name for c in synced))
        except Exception as exc:
            log.warning("discord.commands_sync_failed", error=repr(exc))

    @property
    def message_content(self) -> bool:
        return self._message_content

    def content_refused(self) -> bool:
        """The gateway refused the MESSAGE_CONTENT intent: connect without it from now on (DMs
        and mentions still work); False if already without it (nothing left to try)."""
        log.error("discord.intent_disallowed", hint=CONTENT_HINT)
        if not self._message_content:
            return False
        self._message_content = False
        return True

    def catch_up(self, catchup: CatchUp, client: discord.Client) -> None:
        """Fetch what a new gateway session missed in the channels ``catchup`` saw."""
        self._spawn(catchup.run(client, self.on_message), "adapter:discord:catch-up")

    def spawn(self, coro: Any, name: str) -> None:
        self._spawn(coro, name)

    def _spawn(self, coro: Any, name: str) -> None:
        task = asyncio.create_task(coro, name=name)
        self._side_tasks.add(task)
        task.add_done_callback(self._side_tasks.discard)

    # -- client events ------------------------------------------------------------------------

    async def on_ready(self) -> None:
        client = self.client
        user = client.user if client is not None else None
        self.supervisor.ready(f"connected as {user}" if user else "connected")
        log.info("discord.ready", user=str(user), message_content=self._message_content)
        self.sessions += 1
        if self.sessions > 1 and client is not None:  # a new session: nothing was replayed
            self.catch_up(self.catchup, client)

    async def on_resumed(self) -> None:
        self.supervisor.ready("resumed")
        log.info("discord.resumed")

    async def on_disconnect(self) -> None:
        if not self._stopping:
            self.disconnects += 1
            self.supervisor.down("disconnected; reconnecting")
            log.info("discord.disconnected")

    async def on_message(self, message: discord.Message) -> None:
        client = self.client
        if not self._intake or client is None or client.user is None:
            return
        self.catchup.saw(message)
        if message.author.id == client.user.id:
            return  # Discord echoes our own messages back
        try:
            await self._take(message, client.user.id)
        except Exception:  # one boundary per event: a bad payload never stops the adapter
            log.exception("discord.message_failed", message_id=message.id)

    async def _take(self, message: discord.Message, bot_id: int) -> None:
        def read(per_user: bool) -> Inbound | None:
            inbound = message_event(message, bot_id, per_user)
            if inbound is not None and looks_content_less(message):
                self._warn_content_less()
            return inbound

        key = str(message.id)  # the event's message_id

        async def admitted(event: MessageEvent) -> MessageEvent:
            self.outbox.release(key)
            return event

        self.outbox.hold(key)  # a refusal is posted to the channel, as no reply
        try:
            await self.intake.take(read, admitted=admitted)
        finally:
            self.outbox.release(key)

    def _warn_content_less(self) -> None:
        if not self._warned_content:
            self._warned_content = True
            log.warning("discord.empty_content", hint=CONTENT_HINT)

    async def on_command(self, interaction: discord.Interaction[Any], name: str, args: str) -> None:
        if not self._intake:
            return
        try:
            await self._take_command(interaction, name, args)
        except Exception:
            log.exception("discord.command_failed", interaction_id=interaction.id)

    async def _take_command(
        self, interaction: discord.Interaction[Any], name: str, args: str
    ) -> None:
        key = str(interaction.id)  # the event's message_id

        async def admitted(event: MessageEvent) -> MessageEvent:
            self.outbox.release(key)
            if await self.outbox.defer(interaction, event.session_key):
                return replace(event, reply_context=reply_context(interaction))  # for a replay
            return event

        self.outbox.hold(key, interaction)  # a refusal answers it privately
        try:
            taken = await self.intake.take(
                lambda per_user: command_event(interaction, name, args, per_user),
                admitted=admitted,
            )
        finally:
            self.outbox.release(key)
        if taken.outcome == "closed" and taken.event is not None:
            text = "The gateway is restarting; please try again in a moment."
            await self.send(OutboundMessage.to(taken.event, text, "notice"))

    # -- delivery -----------------------------------------------------------------------------

    async def send(self, message: OutboundMessage) -> None:
        await self.outbox.send(message)

    def stream(self, event: MessageEvent) -> StreamSink | None:
        return self.outbox.preview(event) if self.config.streaming else None

    async def download(self, attachment: Attachment) -> Path:
        """Fetch an attachment from Discord's CDN into ``<home>/media`` (never at intake), its
        link renewed if it expired; a foreign host, a file over `media_max_bytes` or a link
        Discord will not renew raises `PermanentAdapterError`."""
        return await self.links.fetch(attachment)

    def adopt_preview(self, event: MessageEvent, ref: str) -> None:
        self.outbox.adopt(event, ref)

    def resume_reply(self, event: MessageEvent) -> None:
        self.outbox.resume(event)

    async def _send_typing(self, event: MessageEvent) -> None:
        await self.outbox.typing(snowflake(event.thread_id or event.chat_id, "channel"))

    def _rest_client(self) -> discord.Client:
        client = self.client
        if client is None or not self._logged_in or client.is_closed():
            raise TransientAdapterError("discord: the client is (re)connecting")
        return client
