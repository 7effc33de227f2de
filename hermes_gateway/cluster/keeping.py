"""Keeping session leases in cluster mode: renewed every third of the lease (a failed renewal
tried again soon), given up a margin before their deadline, so a run stops calling the model
before any other instance can take its session. The runner's `SessionLeases` in a cluster."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from typing import Any

import structlog

from hermes_gateway.cluster.lease import Coordinator, Lease
from hermes_gateway.core.session_leases import LeaseHolder
from hermes_gateway.core.sessions import Pending
from hermes_gateway.errors import CoordinationUnavailable
from hermes_gateway.store.store import Fence

log = structlog.get_logger("hermes.cluster")


class Keeping:
    """The leases this instance holds, each with a timer at its deadline less `margin_s`.
    `Ownership` builds it, takes leases into it (`hold`) and runs `keep` as one of its loops;
    ``taking``: a takeover of the session is under way here (its lease is kept meanwhile);
    ``dropped``: what a lost lease dropped here, to wait for the session's next owner."""

    def __init__(
        self,
        coordinator: Coordinator,
        owes: Callable[[str], bool],
        taking: Callable[[str], bool],
        dropped: Callable[[list[Pending]], None],
    ) -> None:
        self.coordinator = coordinator
        self.owes = owes  # a reply of the session is still being delivered
        self.taking = taking
        self.dropped = dropped
        self.leases: dict[str, Lease] = {}
        lease_s = coordinator.lease_s
        # a request sent just before a run stops must reach the model before the lease can
        # expire in the store, so runs stop this long before the holder's own deadline
        self.margin_s = min(1.0, lease_s / 4)
        self.retry_s = min(0.5, lease_s / 10)  # a renewal that could not reach the store
        self._pause = lease_s / 3
        self._timers: dict[str, asyncio.TimerHandle] = {}
        self._runner: LeaseHolder | None = None  # the runner, once it bound itself

    def bind(self, holder: LeaseHolder) -> None:
        """The runner, as it is built: it runs the sessions these leases are of."""
        if self._runner is not None:
            raise RuntimeError("the session leases are bound to a runner already")
        self._runner = holder

    @property
    def runner(self) -> LeaseHolder:
        """The runner the leases were given to (an error before it was built)."""
        if self._runner is None:
            raise RuntimeError("no runner was built with these session leases")
        return self._runner

    def fence_for(self, key: str) -> Fence:
        """The token a run of the session writes under. With no lease held (it was lost while
        a takeover replay went on) token 0, which the store refuses once the session was
        claimed: a run in cluster mode never writes unfenced."""
        lease = self.leases.get(key)
        return Fence(key, 0) if lease is None else lease.fence

    def until(self, key: str) -> float:
        """Until when (monotonic) a run of the session may begin a model or tool call: 0
        without a lease, so a run never calls the model unleased."""
        lease = self.leases.get(key)
        return 0.0 if lease is None else lease.deadline - self.margin_s

    def lost(self, key: str) -> None:
        """A run of the session found its lease past `until`: the session is given up."""
        self._lose(key, "run_expired")

    def held(self, key: str) -> bool:
        """This instance holds the session's lease with time to use it."""
        return time.monotonic() < self.until(key)

    def hold(self, key: str, lease: Lease) -> None:
        """Keep ``lease`` (new or renewed); its timer gives it up at `until` unless renewed."""
        self.leases[key] = lease
        if (old := self._timers.pop(key, None)) is not None:
            old.cancel()
        until = lease.deadline - self.margin_s
        self._timers[key] = asyncio.get_running_loop().call_later(
            max(0.0, until - time.monotonic()), self._expired, key, lease
        )
        self.runner.extend(key, until)

    def _drop(self, key: str) -> Lease | None:
        if (timer := self._timers.pop(key, None)) is not None:
            timer.cancel()
        return self.leases.pop(key, None)

    def _expired(self, key: str, lease: Lease) -> None:
        if self.leases.get(key) is not lease:
            return  # renewed, released or lost meanwhile
        if self._idle(key):  # nothing to stop: let it go as the next round would have
            self._drop(key)
            self.runner.forget(key)
            return
        late = time.monotonic() - (lease.deadline - self.margin_s)
        self._lose(key, "deadline", late_s=round(late, 3))

    def _idle(self, key: str) -> bool:
        return self.runner.idle(key) and not self.owes(key) and not self.taking(key)

    def _lose(self, key: str, reason: str, **why: Any) -> None:
        """The lease is lost (or soon may be): the run stops now and nothing of it is written;
        the session's next owner answers its messages from the inbox."""
        lease = self._drop(key)
        token = None if lease is None else lease.token
        log.warning("cluster.lease_lost", session_key=key, reason=reason, token=token, **why)
        self.dropped(self.runner.relinquish(key))

    async def keep(self) -> None:
        """Release the leases of idle sessions, then renew those of busy ones, each all in one
        round trip (one call per lease took longer than a lease with a few hundred sessions
        waiting for the pool). Renewals that cannot reach the store are tried again after `retry_s`
        (each lease stays until its timer, unless a retry gets through first)."""
        pause, due = self._pause, time.monotonic() + self._pause
        await asyncio.sleep(pause)
        late = round(time.monotonic() - due, 3)  # the loop's lag
        self._pause = self.coordinator.lease_s / 3
        idle = [key for key in self.leases if self._idle(key)]
        released = [lease for key in idle if (lease := self._drop(key)) is not None]
        for lease in released:  # forgotten before another instance can take it
            self.runner.forget(lease.key)
        if released:
            with contextlib.suppress(CoordinationUnavailable):
                await self.coordinator.release_all(released)
        busy = list(self.leases.items())
        if busy and not await self._renew(busy, late):
            self._pause = self.retry_s
        with contextlib.suppress(CoordinationUnavailable):
            await self.coordinator.beat()  # alive, for the other instances' surveys

    async def _renew(self, busy: list[tuple[str, Lease]], late: float) -> bool:
        """Renew the leases of ``busy``; False when the store could not be reached."""
        started = time.monotonic()
        try:
            answers = await self.coordinator.renew_all([lease for _, lease in busy])
        except CoordinationUnavailable:
            return False
        took = time.monotonic() - started
        if took > self.margin_s:
            log.warning("cluster.renewal_slow", leases=len(busy), seconds=round(took, 3))
        given_up = []  # by their timers while the call was out: renewed for nobody
        for (key, lease), renewed in zip(busy, answers, strict=True):
            if self.leases.get(key) is not lease:
                if renewed is not None:
                    given_up.append(renewed)
            elif renewed is None:  # expired in the store, or taken over
                left = round(lease.deadline - started, 3)
                self._lose(key, "refused", late_s=late, left_s=left)
            else:
                self.hold(key, renewed)
        if given_up:
            with contextlib.suppress(CoordinationUnavailable):
                await self.coordinator.release_all(given_up)
        return True

    async def close(self) -> None:
        """Stop the timers and release every lease, all in one round trip (a stop with a
        thousand sessions held must not wait for a thousand): other instances take them."""
        for timer in self._timers.values():
            timer.cancel()
        self._timers.clear()
        leases = list(self.leases.values())
        self.leases.clear()
        if leases:
            with contextlib.suppress(CoordinationUnavailable):
                await self.coordinator.release_all(leases)
