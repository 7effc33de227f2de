"""Discord's gateway shards when the bot is sharded or runs in a cluster: one discord.py client
per shard this instance serves (a shard gained is connected, a shard lost is closed, the others
go on untouched), while the adapter's own client only logs in and sends, for every session."""

from __future__ import annotations

import asyncio
import contextlib
from typing import TYPE_CHECKING, Any

import structlog

import discord
from adapters.discord.catchup import CatchUp
from adapters.discord.client import HermesClient
from adapters.discord.handover import IntakeMarks, MarkSync, parse
from adapters.discord.identify import Pacer, concurrency
from hermes_gateway.platforms import CoordinationUnavailable, GiveUp, Shares

if TYPE_CHECKING:
    from adapters.discord.adapter import DiscordAdapter

log = structlog.get_logger("hermes.adapters.discord")


class Shard:
    """One shard's connection, kept up (a new client after a failure, with backoff); its own
    catch-up of what a new session missed in the channels it served."""

    restart_max_s = 60.0

    def __init__(self, fleet: Fleet, n: int) -> None:
        self.fleet, self.n = fleet, n
        self.client: HermesClient | None = None
        self.ready = False
        self.sessions = 0  # READYs seen: after the first, missed messages are fetched
        self.catchup = CatchUp()
        self.marks = IntakeMarks()  # what the shard's next holder fetches after (in a cluster)
        self.recalled = fleet.shares.everything  # the last holder's marks were read
        self.behind = False  # those marks are to be fetched after, at the next READY
        self._recalling = False
        self.task = asyncio.create_task(self._run(), name=f"adapter:discord:shard:{n}")

    # -- the client's events ------------------------------------------------------------------

    async def on_ready(self) -> None:
        self.ready, self.sessions = True, self.sessions + 1
        log.info("discord.shard_ready", shard=self.n, count=self.fleet.count)
        if self.sessions > 1 or self.behind:  # a new session: nothing was replayed
            self._catch_up()
        self.fleet.report()

    async def recall(self) -> None:
        """Start from the newest ids the shard's last holder kept, and fetch what came after
        them (at READY, or now if connected). Raises `CoordinationUnavailable`."""
        if self._recalling:  # the mark sync's retry while the first read is still out
            return
        self._recalling = True
        try:
            last = parse(await self.fleet.shares.notes(self.n))
        finally:
            self._recalling = False
        self.recalled = True
        self.marks.merge(last)
        self.catchup.resume(last)
        log.info("discord.shard_marks_read", shard=self.n, channels=len(last))
        self.behind = bool(last)
        if self.behind and self.ready:
            self._catch_up()

    def _catch_up(self) -> None:
        self.behind = False
        if self.client is not None:
            take = self.catchup.run(self.client, self.on_message)
            self.fleet.adapter.spawn(take, f"adapter:discord:catch-up:{self.n}")

    async def on_resumed(self) -> None:
        self.ready = True
        self.fleet.report()

    async def on_disconnect(self) -> None:
        if self.ready and not self.fleet.closing:
            self.fleet.adapter.disconnects += 1
        self.ready = False
        self.fleet.report()

    async def on_message(self, message: discord.Message) -> None:
        self.catchup.saw(message)
        self.marks.begin(message)
        try:
            await self.fleet.adapter.on_message(message)
        finally:
            self.marks.end(message)

    async def on_command(self, interaction: discord.Interaction[Any], name: str, args: str) -> None:
        await self.fleet.adapter.on_command(interaction, name, args)

    # -- the connection -----------------------------------------------------------------------

    async def _run(self) -> None:
        if not self.recalled:  # else the fleet's mark sync reads them once it can
            with contextlib.suppress(CoordinationUnavailable):
                await self.recall()
        delay = 0.0
        while True:
            await asyncio.sleep(delay)
            adapter = self.fleet.adapter
            self.client = HermesClient(
                self,
                adapter.config,
                message_content=adapter.message_content,
                shard=(self.n, self.fleet.count),
                pace=self.fleet.pacer,
            )
            try:
                await self.client.login(adapter.config.token)
                await self.client.connect(reconnect=True)
                delay = 1.0
            except discord.LoginFailure:
                return self.fleet.fail("the bot token was rejected")
            except discord.PrivilegedIntentsRequired:
                if not adapter.content_refused():
                    return self.fleet.fail("gateway refused the intents")
                delay = 0.0
            except discord.ConnectionClosed as exc:
                log.warning("discord.connection_closed", shard=self.n, code=exc.code)
                if exc.code == 4004:
                    return self.fleet.fail("the bot token was rejected")
                delay = min(self.restart_max_s, max(1.0, delay * 2))
            except Exception as exc:
                log.warning("discord.shard_failed", shard=self.n, error=repr(exc))
                delay = min(self.restart_max_s, max(1.0, delay * 2))
            finally:
                self.ready = False
                with contextlib.suppress(Exception):
                    await self.client.close()
                self.fleet.report()

    async def close(self) -> None:
        self.task.cancel()
        await asyncio.gather(self.task, return_exceptions=True)
        if self.client is not None:
            with contextlib.suppress(Exception):
                await self.client.close()


class Fleet:
    """The shards this instance serves, following ``shares``; the adapter's health says which
    are connected (ready with none held: the other instances serve them all)."""

    def __init__(self, adapter: DiscordAdapter, shares: Shares, buckets: int = 1) -> None:
        self.adapter, self.shares = adapter, shares
        self.count = shares.count
        self.shards: dict[int, Shard] = {}
        self.closing = False
        self._started = False
        self._failed: asyncio.Future[str] | None = None
        self.pacer = Pacer(shares, lambda: adapter.config.identify_delay_s, buckets)
        self.mark_sync = None if shares.everything else MarkSync(self)

    async def run(self) -> None:
        """Serve the held shards until a fatal error (raised as `GiveUp`) or a cancel."""
        self._failed = asyncio.get_running_loop().create_future()
        if not self._started:
            self._started = True
            await self.shares.start()
            if self.mark_sync is not None:
                self.mark_sync.start()
        try:
            while True:
                self._follow()
                changed: asyncio.Future[Any] = asyncio.ensure_future(self.shares.changed())
                failed: asyncio.Future[Any] = self._failed
                await asyncio.wait({changed, failed}, return_when=asyncio.FIRST_COMPLETED)
                changed.cancel()
                if self._failed.done():
                    raise GiveUp(self._failed.result())
        finally:
            await self._close(list(self.shards))

    async def stop(self) -> None:
        """Give every shard back (the other instances take them at once) and disconnect."""
        self.closing = True
        if self.mark_sync is not None:
            await self.mark_sync.stop()
        await self.shares.release()
        await self._close(list(self.shards))

    def fail(self, detail: str) -> None:
        if self._failed is not None and not self._failed.done():
            self._failed.set_result(detail)

    def _follow(self) -> None:
        held = set() if self.closing else set(self.shares.held)
        for n in sorted(held - set(self.shards)):
            log.info("discord.shard_taken", shard=n, count=self.count)
            self.shards[n] = Shard(self, n)
        gone = sorted(set(self.shards) - held)
        if gone:
            log.info("discord.shards_left", shards=gone, count=self.count)
            self.adapter.spawn(self._close(gone), "adapter:discord:shards-left")
        self.report()

    async def _close(self, numbers: list[int]) -> None:
        shards = [self.shards.pop(n) for n in numbers if n in self.shards]
        await asyncio.gather(*(shard.close() for shard in shards), return_exceptions=True)
        self.report()

    def report(self) -> None:
        """The adapter's health: every shard held connected (or none held), or which wait."""
        if self.closing:
            return
        held = sorted(self.shards)
        waiting = [n for n in held if not self.shards[n].ready]
        names = ", ".join(map(str, held))
        if not held:
            self.adapter.supervisor.ready(f"no shard of {self.count} here: other instances serve")
        elif waiting:
            wait = ", ".join(map(str, waiting))
            self.adapter.supervisor.down(f"shard(s) {wait} of {self.count} connecting")
        else:
            self.adapter.supervisor.ready(f"shard(s) {names} of {self.count} connected")

    def status(self) -> dict[str, Any]:
        return {"count": self.count, "ready": sorted(n for n, s in self.shards.items() if s.ready)}


async def agree(adapter: DiscordAdapter, role: str, count: int, agreed: int) -> Shares:
    """The cluster counts ``agreed`` shards, this instance ``count``: a configured count is
    refused (the two would split different shards), Discord's recommendation follows it."""
    if adapter.config.shard_count is not None:
        detail = (
            f"platforms.discord.shard_count is {count} here but {agreed} on the cluster's other "
            "instances; give every instance the same shard_count and restart this one"
        )
        log.error("discord.shard_count_mismatch", configured=count, cluster=agreed)
        raise GiveUp(detail)
    log.info("discord.shard_count_followed", recommended=count, cluster=agreed)
    shares = adapter.host.shares(role, agreed)
    if await shares.agree() != agreed:  # changed meanwhile: split again, after a backoff
        raise RuntimeError("the cluster's shard count changed while it was read")
    return shares


async def split(adapter: DiscordAdapter, client: discord.Client) -> Fleet | None:
    """After the first login: None to run one connection as ever (one shard on one process),
    else the fleet of the shards this instance serves (`shard_count`, or what Discord
    recommends; in a cluster ``discord:<bot id>:shard:<n>`` leases decide which)."""
    count, limit = adapter.config.shard_count, None
    if count is None:
        count, _url, limit = await client.http.get_bot_gateway()
    bot = client.user.id if client.user is not None else 0
    role = f"discord:{bot}:shard"
    shares = adapter.host.shares(role, count)
    if count == 1 and shares.everything:
        return None
    agreed = await shares.agree()  # in a cluster: the first instance's count
    if agreed != count:
        shares, count = await agree(adapter, role, count, agreed), agreed
    # one process spaces all its IDENTIFYs; a cluster's gates go by Discord's buckets
    buckets = 1 if shares.everything else await concurrency(client, limit)
    log.info("discord.sharded", count=count, cluster=not shares.everything, buckets=buckets)
    return Fleet(adapter, shares, buckets)
