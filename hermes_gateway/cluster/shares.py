"""Numbered parts of a platform's intake (Discord shards) split over a cluster's instances: each
part is a leader lease; an instance takes at most its fair share while others stand by, gives
one back when an instance joins, and takes a dead one's once its lease runs out."""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import structlog

from hermes_gateway.cluster.leadership import ClusterLeader
from hermes_gateway.cluster.lease import Coordinator, Survey
from hermes_gateway.errors import CoordinationUnavailable

log = structlog.get_logger("hermes.cluster")
MEMBER = ":member:"  # "<role>:member:<instance>": the lease of an instance serving the role


@dataclass(frozen=True, slots=True)
class Plan:
    take: tuple[int, ...]  # free parts to ask for, in order
    give: tuple[int, ...]  # held parts to hand to an instance below its share


def fair_share(count: int, instances: int) -> int:
    """The most parts one instance holds while the others could hold the rest."""
    return math.ceil(count / max(1, instances))


def plan(
    count: int,
    me: str,
    held: Iterable[int],
    owners: Mapping[int, str],
    alive: Iterable[str],
    orphans: Iterable[int] = (),
) -> Plan:
    """One round's moves. ``owners``: each part's holder per the coordination store;
    ``alive``: instances with a recent heartbeat; ``orphans``: parts seen free last round too.
    A free part is taken while below the fair share, and an orphan by anyone (a part nobody
    under its share took must not stay unheard, e.g. while a dead instance still looks alive);
    above the share, one part is given back, and only when a live instance holds fewer than
    the share (someone will take it)."""
    mine = set(held)
    live = set(alive) | {me}
    share = fair_share(count, len(live))
    free = [n for n in range(count) if n not in mine and n not in owners]
    room = max(0, share - len(mine))
    lone = set(orphans)
    take = tuple(free[:room]) + tuple(n for n in free[room:] if n in lone)
    loads = dict.fromkeys(live, 0)
    for owner in owners.values():
        loads[owner] = loads.get(owner, 0) + 1
    short = any(loads[i] < share for i in live if i != me)
    give = (max(mine),) if len(mine) > share and short else ()
    return Plan(take, give)


class SoleShares:
    """One process: it holds every part, always."""

    everything = True

    def __init__(self, count: int) -> None:
        self.count = count
        self.held = frozenset(range(count))

    async def start(self) -> None:
        return None

    async def changed(self) -> None:
        await asyncio.get_running_loop().create_future()

    async def release(self) -> None:
        return None

    async def note(self, n: int, values: Mapping[str, str], keep_s: float) -> None:
        return None

    async def notes(self, n: int) -> dict[str, str]:
        return {}

    async def gate(self, name: str, ttl_s: float) -> float:
        return 0.0

    async def agree(self) -> int:
        return self.count


class ClusterShares:
    """The parts ``<role>:<n>`` for n < count, each a `ClusterLeader` made by ``leader``. A
    round every third of the lease (at most 3 s) surveys the cluster and follows `plan`. A
    part given back stays in `held` for `handover_s` more (its connection goes on while the
    next holder connects). A part whose lease was lost (not renewed in time: coordination
    unreachable, this process paused) stays in `held` until the survey shows another holder,
    and is taken back if it shows none: a part served twice for a while costs duplicates,
    which the inbox drops; a part served by nobody loses messages."""

    everything = False

    def __init__(
        self, coordinator: Coordinator, role: str, count: int, leader: Callable[[str], Any]
    ) -> None:
        self.coordinator = coordinator
        self.count = count
        self.role = role
        self.leaders: dict[int, ClusterLeader] = {n: leader(f"{role}:{n}") for n in range(count)}
        # held for as long as this instance serves the role: the split counts only those
        # (an instance without the platform, or refused for its count, would be handed a
        # part now and then, with nobody connected for it until it was taken back)
        self.member = ClusterLeader(coordinator, f"{role}{MEMBER}{coordinator.instance_id}")
        self.round_s = min(3.0, max(0.2, coordinator.lease_s / 3))
        self.handover_s = min(5.0, coordinator.lease_s)
        self.keep_s = 3 * coordinator.lease_s  # the agreed count outlives its last holder
        self._agreed = False  # the cluster's count is this one's: the rounds keep it
        self.held: frozenset[int] = frozenset()
        self._leading: set[int] = set()
        self._kept: set[int] = set()  # lease lost, still served until another holder shows
        self._orphans: set[int] = set()
        self._given: dict[int, float] = {}  # part -> monotonic time it was given back
        self._changed = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []
        self._watchers: dict[int, asyncio.Task[None]] = {}  # part -> waits for its loss

    async def start(self) -> None:
        self._tasks.append(asyncio.create_task(self._rounds(), name=f"shares:{self.role}"))

    async def changed(self) -> None:
        await self._changed.wait()
        self._changed.clear()

    async def release(self) -> None:
        tasks = self._tasks + list(self._watchers.values())
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._tasks.clear()
        self._watchers.clear()
        for n in sorted(self._leading):
            await self.leaders[n].release()
        await self.member.release()
        self._leading.clear()
        self._kept.clear()
        self._set(frozenset())

    async def note(self, n: int, values: Mapping[str, str], keep_s: float) -> None:
        await self.coordinator.note(f"{self.role}:{n}", values, keep_s)

    async def notes(self, n: int) -> dict[str, str]:
        return await self.coordinator.notes(f"{self.role}:{n}")

    async def gate(self, name: str, ttl_s: float) -> float:
        return await self.coordinator.gate(f"{self.role}:{name}", ttl_s)

    async def agree(self) -> int:
        """The count the cluster uses (the first instance's); kept alive by the rounds while
        it is this one's, for as long as instances count as alive (3 leases) after."""
        kept = await self.coordinator.settle(f"{self.role}:count", str(self.count), self.keep_s)
        self._agreed = kept == str(self.count)
        return int(kept) if kept.isdigit() else -1

    def _set(self, held: frozenset[int]) -> None:
        if held != self.held:
            self.held = held
            self._changed.set()

    async def _rounds(self) -> None:
        while True:
            try:
                if self._agreed and await self.agree() != self.count:
                    # the kept count expired (coordination lost for 3 leases) and an
                    # instance with another count set it: the two split different shards
                    log.error("cluster.shares_count_changed", role=self.role, count=self.count)
                if not self.member.leading:
                    await self.member.try_acquire()
                await self._round(await self.coordinator.survey())
            except CoordinationUnavailable:
                pass  # nothing taken or given meanwhile; held parts stay served
            except Exception:  # a bug must not end the rounds: the parts would go unserved
                log.exception("cluster.shares_round_failed", role=self.role)
            self._drop_lost()
            await asyncio.sleep(self.round_s)

    async def _round(self, survey: Survey) -> None:
        self._drop_lost()
        me = self.coordinator.instance_id
        owners = self._owners(survey)
        members = self._members(survey)
        lease_s = self.coordinator.lease_s
        alive = [i for i, age in survey.instances.items() if age < lease_s and i in members]
        now = time.monotonic()
        recent = {n for n, at in self._given.items() if now - at < self.coordinator.lease_s}
        orphans = self._orphans - recent  # not straight back what was just handed over
        for n in sorted(self._kept):
            if owners.get(n, me) != me:
                log.info("cluster.share_served_elsewhere", role=self.role, part=n, by=owners[n])
                self._kept.discard(n)
        mine = self._leading | self._kept
        moves = plan(self.count, me, mine, owners, alive, orphans)
        self._orphans = {n for n in range(self.count) if n not in owners}
        for n in sorted(self._kept - set(owners)) + list(moves.take):
            if await self.leaders[n].try_acquire():
                self._leading.add(n)
                self._kept.discard(n)
                self._given.pop(n, None)
                self._watch(n)
        for n in moves.give:
            log.info("cluster.share_given", role=self.role, part=n, instances=len(alive))
            self._leading.discard(n)
            self._kept.discard(n)
            self._given[n] = now
            watcher = self._watchers.pop(n, None)
            if watcher is not None:
                watcher.cancel()
            await self.leaders[n].release()
        self._set(frozenset(self._leading | self._kept | self._handing_over()))

    def _owners(self, survey: Survey) -> dict[int, str]:
        prefix = f"{self.role}:"
        owners: dict[int, str] = {}
        for held in survey.leases:
            if held.kind == "leader" and held.key.startswith(prefix):
                part = held.key[len(prefix) :]
                if part.isdigit() and int(part) < self.count:
                    owners[int(part)] = held.owner
        return owners

    def _members(self, survey: Survey) -> set[str]:
        prefix = f"{self.role}{MEMBER}"
        return {h.owner for h in survey.leases if h.kind == "leader" and h.key.startswith(prefix)}

    def _handing_over(self) -> set[int]:
        now = time.monotonic()
        return {n for n, at in self._given.items() if now - at < self.handover_s}

    def _watch(self, n: int) -> None:
        async def watch() -> None:
            await self.leaders[n].lost()
            self._drop_lost()

        old = self._watchers.pop(n, None)
        if old is not None:
            old.cancel()
        self._watchers[n] = asyncio.create_task(watch(), name=f"shares:{self.role}:{n}:lost")

    def _drop_lost(self) -> None:
        lost = {n for n in self._leading if not self.leaders[n].leading}
        for n in lost:
            log.error("cluster.share_lost", role=self.role, part=n)
        self._leading -= lost
        self._kept |= lost
        self._set(frozenset(self._leading | self._kept | self._handing_over()))

    def status(self) -> dict[str, Any]:
        return {
            "count": self.count,
            "held": sorted(self._leading),
            "kept_unleased": sorted(self._kept),
            "handing_over": sorted(self._handing_over() - self._leading),
        }
