"""Cluster mode (`cluster.redis_url`): each session's messages run on the instance holding its
lease; others pass theirs to it. Leases are kept while busy, released when idle, given up when
lost; sessions nobody owns are taken over from the inbox (docs/cluster.md)."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import itertools
import json
import time
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

import structlog

from hermes_gateway.cluster.keeping import Keeping
from hermes_gateway.cluster.lease import Control, Coordinator, Lease, Seen, Survey
from hermes_gateway.core.replay import Replayer
from hermes_gateway.core.sessions import Pending
from hermes_gateway.errors import CoordinationUnavailable, FencedOut, StoreError
from hermes_gateway.events import MessageEvent
from hermes_gateway.platform_spec import capabilities
from hermes_gateway.store.inbox import event_from_json
from hermes_gateway.store.store import Store

log = structlog.get_logger("hermes.cluster")
Route = Callable[[MessageEvent, int | None], Awaitable[None]]
Refuse = Callable[[MessageEvent, int | None, str, str], Awaitable[None]]
Notify = Callable[[MessageEvent, str], Awaitable[None]]
MAX_HOPS = 3  # an owner that keeps changing under a notice: the inbox sweep answers it
ELSEWHERE = (
    "This conversation is running on another gateway instance right now; send it there, or "
    "again once it has answered."
)
NO_COORDINATION = "The gateway cannot coordinate with its other instances right now; retry soon."
WAITING = (
    "I can't reach the service my gateway instances coordinate through, so your message waits; "
    "I'll answer it as soon as it is back."
)
SURVEY_EVERY_S = 5.0  # at most this often a scan of the coordination store (for /status)
TELL_WAITING_AFTER_S = 30.0  # default of `cluster.waiting_notice_s`
OWNED_SHOWN = 200  # session leases listed by `/status` (all of them are counted)
SWEEP_TAKES = 8  # sessions a sweep takes over at the same time
CLOSE_WAIT_S = 2.0  # for the loops to end at a stop, before and after their connections close


class Ownership:
    """Routes each message through the session's lease; runs the renew (`Keeping`), receive
    and takeover loops. ``route_here`` is the one-process route (commands, else the runner).
    Its `keeping` is the runner's `SessionLeases`: the runner is built with it."""

    def __init__(
        self,
        coordinator: Coordinator,
        store: Store,
        route_here: Route,
        new_replayer: Callable[[], Replayer],
        owes: Callable[[str], bool],
        max_age_s: float,
        refuse: Refuse | None = None,
        notify: Notify | None = None,
        tell_waiting_after_s: float = TELL_WAITING_AFTER_S,
    ) -> None:
        self.coordinator = coordinator
        self.store = store
        self.route_here = route_here
        self.new_replayer = new_replayer
        self.refuse = refuse
        self.notify = notify
        # per session, its entries waiting for coordination while a notice's timer runs
        self._waiting: dict[str, list[int]] = {}
        self.tell_waiting_after_s = tell_waiting_after_s  # waiting this long: the user is told
        self.max_age_s = max_age_s
        self._seen = Seen()
        self._tasks: list[asyncio.Task[None]] = []
        self._closing = False  # set by `close`: the loops end at their next turn
        self._taking: set[str] = set()  # sessions being taken over (replayed) here
        self._swept = False
        self.survey: Survey | None = None  # the whole cluster, refreshed now and then
        self.surveyed = 0.0  # monotonic time of that survey
        # owes: a reply of the session is still being delivered in the background
        self.keeping = Keeping(coordinator, owes, lambda key: key in self._taking, self._dropped)

    @property
    def me(self) -> str:
        return self.coordinator.instance_id

    @property
    def leases(self) -> dict[str, Lease]:
        """The session leases this instance holds."""
        return self.keeping.leases

    async def start(self) -> None:
        with contextlib.suppress(CoordinationUnavailable):  # the loops keep trying
            await self.coordinator.start()
            await self.coordinator.beat()
        beat = self.coordinator.lease_s / 3
        for loop, name in (
            (self._receive, "receive"),
            (self.keeping.keep, "keep"),
            (self._sweep, "sweep"),
            (self._look, "survey"),
        ):
            work = _forever(loop, beat, lambda: self._closing)
            self._tasks.append(asyncio.create_task(work, name=f"cluster-{name}"))

    async def close(self) -> None:
        self._closing = True
        for task in self._tasks:
            task.cancel()
        # A cancel can be lost in a Redis read whose own timeout fires at the same moment (the
        # loop then took it for an outage and read again, and the stop waited for ever): the
        # loops also end at `_closing`, and closing the connections ends a read still going.
        stuck = set(self._tasks)
        if stuck:
            _, stuck = await asyncio.wait(stuck, timeout=CLOSE_WAIT_S)
        await self.keeping.close()
        await self.coordinator.close()
        if stuck:
            log.warning("cluster.loops_stuck_at_close", loops=sorted(t.get_name() for t in stuck))
            await asyncio.wait(stuck, timeout=CLOSE_WAIT_S)

    def status(self) -> dict[str, Any]:
        """For `/status`: this instance, whether coordination answers, how many sessions it
        owns and the first `OWNED_SHOWN` of them with their leases' seconds left."""
        now = time.monotonic()
        return {
            "instance": self.me,
            "available": self.coordinator.available,
            "owned_count": len(self.leases),
            # a page of them: `/status` must not cost a walk over a thousand leases
            "owned": {
                k: round(lease.deadline - now, 1)
                for k, lease in itertools.islice(self.leases.items(), OWNED_SHOWN)
            },
            "survey": None if self.survey is None else self.survey.as_dict(),
            "survey_age_s": round(now - self.surveyed, 1) if self.survey is not None else None,
        }

    # -- routing ------------------------------------------------------------------------

    async def route(self, event: MessageEvent, inbox_id: int | None, hops: int = 0) -> None:
        """Run ``event`` here if this instance owns (or now takes) its session, else pass it
        to the owner. With coordination down it waits in the inbox for the sweep."""
        key = event.session_key
        # a platform that cannot speak unasked (the local API: an open HTTP request) is
        # answered here or refused, never passed on or left waiting
        here = not capabilities(event.platform).can_push and self.refuse is not None
        try:
            if await self.own(key):
                await self.route_here(event, inbox_id)
                return
            owner = await self.coordinator.owner(key)
        except CoordinationUnavailable as exc:
            log.warning("cluster.message_waits", session_key=key, error=str(exc))
            if here and self.refuse is not None:
                await self.refuse(event, inbox_id, NO_COORDINATION, "coordination_unavailable")
            elif inbox_id is not None:
                self._tell_later(event, inbox_id)
            return
        if owner is None and hops < MAX_HOPS:  # released meanwhile: try to take it again
            await self.route(event, inbox_id, hops + 1)
            return
        if here and self.refuse is not None:
            await self.refuse(event, inbox_id, ELSEWHERE, "owned_elsewhere")
            return
        if owner is None or hops >= MAX_HOPS:  # passed around: the sweep answers it
            log.info("cluster.message_waits", session_key=key, owner=owner, hops=hops)
            return
        payload = "" if inbox_id is not None else json.dumps(dataclasses.asdict(event))
        notice = Control("queued", key, payload, inbox_id, self.me, hops + 1)
        try:
            await self.coordinator.send(owner, notice)
        except CoordinationUnavailable as exc:
            log.warning("cluster.message_waits", session_key=key, error=str(exc))

    def _dropped(self, items: list[Pending]) -> None:
        """A run stopped by a lease lost while coordination is down (it could not be renewed)
        leaves its messages waiting like one that came during the outage: its user is told."""
        if self.coordinator.available:
            return  # refused by a Redis that answers: the sweep takes it within a lease
        for item in items:
            if item.inbox_id is not None:
                self._tell_later(item.event, item.inbox_id)
                return

    def _tell_later(self, event: MessageEvent, inbox_id: int) -> None:
        """Tell the user, once per session and outage, if a message still waits later. Every
        entry is checked then, not only the first: that one may have been answered meanwhile
        (a run that finished as its lease ran out) while a later one waits."""
        key = event.session_key
        waiting = self._waiting.setdefault(key, [])
        waiting.append(inbox_id)
        if len(waiting) == 1:
            self._later(self._tell_if_waiting(key), f"waiting:{key}")

    async def _tell_if_waiting(self, key: str) -> None:
        """Tell the user why no answer comes if a message still waits for coordination."""
        await asyncio.sleep(self.tell_waiting_after_s)
        try:
            for inbox_id in self._waiting.get(key, []):
                if self.coordinator.available or self.notify is None:
                    return
                if (event := await self.store.accepted(inbox_id)) is not None:
                    await self.notify(event, WAITING)
                    return
        finally:
            self._waiting.pop(key, None)

    def _later(self, work: Coroutine[Any, Any, None], name: str) -> None:
        task = asyncio.create_task(work, name=name)
        self._tasks.append(task)
        task.add_done_callback(self._tasks.remove)

    def instances(self) -> list[str]:
        """The instances alive at the last survey (none before the first)."""
        return [] if self.survey is None else list(self.survey.instances)

    def held(self, key: str) -> bool:
        """Whether this instance holds the session's lease now."""
        return self.keeping.held(key)

    async def own(self, key: str) -> bool:
        """This instance holds the session's lease, taking it if it is free; a new lease's
        token is recorded in the store before anything of the session is read."""
        if self.keeping.held(key):
            return True
        held = self.leases.get(key)
        lease = await self.coordinator.acquire(key)
        if lease is None:
            return False
        if held is None or held.token != lease.token:
            try:
                await self.store.claim(lease.fence)
            except (StoreError, FencedOut) as exc:
                log.error("cluster.claim_failed", session_key=key, error=str(exc))
                with contextlib.suppress(CoordinationUnavailable):
                    await self.coordinator.release(lease)
                raise CoordinationUnavailable(f"cannot record the lease: {exc}") from exc
            lease = await self._fresh(lease)
            self.keeping.runner.forget(key)  # whatever ran it meanwhile, the store has it
        self.keeping.hold(key, lease)
        return True

    async def _fresh(self, lease: Lease) -> Lease:
        """``lease``, renewed if recording its token took so long (a loaded database: seconds
        under a burst of new sessions) that it would run out before the next renewal round;
        `CoordinationUnavailable` if it ran out already (the sweep answers the message)."""
        if lease.deadline - self.keeping.margin_s - time.monotonic() > self.coordinator.lease_s / 2:
            return lease
        renewed = await self.coordinator.renew(lease)
        if renewed is None:
            log.warning("cluster.claim_outlasted_lease", session_key=lease.key)
            raise CoordinationUnavailable("the lease ran out while its token was recorded")
        return renewed

    # -- the loops ----------------------------------------------------------------------

    async def _receive(self) -> None:
        message = await self.coordinator.receive()
        if self._seen.first_time(message) and message.kind == "queued":
            await self._queued(message)
        await self.coordinator.ack(message)

    async def _queued(self, message: Control) -> None:
        inbox_id = message.inbox_id
        if inbox_id is None:
            event: MessageEvent | None = event_from_json(message.text)
        elif self.keeping.runner.knows(message.session_key, inbox_id):
            return  # already here (the sweep or a replay took it first)
        else:
            event = await self.store.accepted(inbox_id)  # None: answered meanwhile
        if event is not None:
            await self.route(event, inbox_id, message.hops)

    async def _look(self) -> None:
        """Refresh the cluster's survey for `/status` (a scan of the coordination store)."""
        with contextlib.suppress(CoordinationUnavailable):
            self.survey, self.surveyed = await self.coordinator.survey(), time.monotonic()
        await asyncio.sleep(max(self.coordinator.lease_s, SURVEY_EVERY_S))

    async def _sweep(self) -> None:
        """Take over sessions with unanswered entries and no owner (it died, a notice was
        lost, coordination was down when they came): replay them here as after a restart.
        The first sweep, at start, takes entries of any age: it is this instance's replay."""
        older_than_s = self.coordinator.lease_s if self._swept else 0.0
        waiting = await self.store.unanswered(older_than_s=older_than_s, max_age_s=self.max_age_s)
        keys = dict.fromkeys(event.session_key for _, event in waiting)
        free = [key for key in keys if key not in self.leases and key not in self._taking]
        # side by side: one after the other, a dead instance's sessions were taken over at
        # one store claim each (seconds apart on a loaded database)
        gate = asyncio.Semaphore(SWEEP_TAKES)
        await asyncio.gather(*(self._take(key, gate) for key in free))
        self._swept = True
        # a third of the lease, like the renewals: a dead owner's sessions are taken within
        # about 1.3 leases of its death rather than 2
        await asyncio.sleep(self.coordinator.lease_s / 3)

    async def _take(self, key: str, gate: asyncio.Semaphore) -> None:
        """Take the session over if nobody owns it (a failure: the next sweep tries again)."""
        async with gate:
            try:
                if await self.coordinator.owner(key) is not None or not await self.own(key):
                    return
            except (CoordinationUnavailable, StoreError) as exc:
                log.debug("cluster.takeover_deferred", session_key=key, error=str(exc))
                return
        self._taking.add(key)
        self._later(self._take_over(key), f"takeover:{key}")

    async def _take_over(self, key: str) -> None:
        """The session's leftovers read under its lease (quarantine included), less what is
        already here, then replayed; the lease is kept until that is done."""
        log.info("cluster.takeover", session_key=key)
        try:
            replayer = self.new_replayer()
            await replayer.load(key)
            replayer.skip(self.keeping.runner.knows)
            await replayer.run()
        finally:
            self._taking.discard(key)


async def _forever(
    step: Callable[[], Awaitable[Any]], pause: float, closing: Callable[[], bool]
) -> None:
    """Run ``step`` again and again until ``closing()``; a failure (coordination or store
    down) waits a beat."""
    while not closing():
        try:
            await step()
        except (CoordinationUnavailable, StoreError) as exc:
            log.debug("cluster.loop_waits", error=str(exc))
            await asyncio.sleep(pause)
        except Exception:
            log.exception("cluster.loop_failed")
            await asyncio.sleep(pause)
