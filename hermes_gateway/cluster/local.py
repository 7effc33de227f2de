"""The in-process coordinator: leases and the control channel in a `LocalHub` shared by the
coordinators of one process (one by default; tests put several "instances" on one hub)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from hermes_gateway.cluster.lease import Control, Kind, Lease, Survey, held, next_token


@dataclass
class _Stream:
    """One instance's unacknowledged messages by sequence number, in order."""

    entries: dict[int, Control] = field(default_factory=dict)
    arrived: asyncio.Event = field(default_factory=asyncio.Event)


class LocalHub:
    """What a coordination store would hold: leases (owner, token, monotonic expiry), the
    token counter, and a stream of messages per instance."""

    def __init__(self) -> None:
        self.leases: dict[tuple[Kind, str], tuple[str, int, float]] = {}
        self.counter = 0
        self.seq = 0
        self.streams: dict[str, _Stream] = {}
        self.beats: dict[str, float] = {}  # instance -> monotonic time of its last heartbeat
        self.notes: dict[str, tuple[dict[str, str], float]] = {}  # name -> map, expiry
        self.gates: dict[str, float] = {}  # name -> monotonic time it opens again
        self.settings: dict[str, tuple[str, float]] = {}  # name -> value, expiry

    def stream(self, instance: str) -> _Stream:
        return self.streams.setdefault(instance, _Stream())


class LocalCoordinator:
    """`Coordinator` within one process: always available, no I/O."""

    def __init__(self, instance_id: str, lease_s: float, hub: LocalHub | None = None) -> None:
        self.instance_id = instance_id
        self.lease_s = lease_s
        self.hub = hub or LocalHub()
        self._cursor = 0  # the last sequence number this reader was given

    @property
    def available(self) -> bool:
        return True

    async def start(self) -> None:
        self.hub.stream(self.instance_id)

    async def close(self) -> None:
        pass

    async def acquire(self, key: str) -> Lease | None:
        return self._take("session", key)

    async def lead(self, role: str) -> Lease | None:
        return self._take("leader", role)

    def _take(self, kind: Kind, key: str) -> Lease | None:
        now = time.monotonic()
        deadline = now + self.lease_s
        held = self.hub.leases.get((kind, key))
        if held is not None and held[2] > now:
            owner, token, _ = held
            if owner != self.instance_id:
                return None
        else:
            token = self.hub.counter = next_token(self.hub.counter, time.time_ns() // 1000)
        self.hub.leases[(kind, key)] = (self.instance_id, token, deadline)
        return Lease(kind, key, self.instance_id, token, deadline)

    async def renew(self, lease: Lease) -> Lease | None:
        now = time.monotonic()
        held = self.hub.leases.get((lease.kind, lease.key))
        if held is None or held[2] <= now or held[:2] != (lease.owner, lease.token):
            return None
        deadline = now + self.lease_s
        self.hub.leases[(lease.kind, lease.key)] = (lease.owner, lease.token, deadline)
        return lease.extended(deadline)

    async def renew_all(self, leases: list[Lease]) -> list[Lease | None]:
        return [await self.renew(lease) for lease in leases]

    async def release(self, lease: Lease) -> None:
        held = self.hub.leases.get((lease.kind, lease.key))
        if held is not None and held[:2] == (lease.owner, lease.token):
            del self.hub.leases[(lease.kind, lease.key)]

    async def release_all(self, leases: list[Lease]) -> None:
        for lease in leases:
            await self.release(lease)

    async def owner(self, key: str) -> str | None:
        return self._holder("session", key)

    async def leader(self, role: str) -> str | None:
        return self._holder("leader", role)

    def _holder(self, kind: Kind, key: str) -> str | None:
        held = self.hub.leases.get((kind, key))
        return held[0] if held is not None and held[2] > time.monotonic() else None

    async def beat(self) -> None:
        self.hub.beats[self.instance_id] = time.monotonic()

    async def survey(self) -> Survey:
        now, now_us = time.monotonic(), time.time_ns() // 1000
        gone = 3 * self.lease_s
        alive = {name: now - at for name, at in self.hub.beats.items() if now - at < gone}
        leases = [
            held(kind, key, owner, token, now_us, deadline - now)
            for (kind, key), (owner, token, deadline) in self.hub.leases.items()
            if deadline > now
        ]
        return Survey(alive, leases)

    async def send(self, to: str, message: Control) -> None:
        self.hub.seq += 1
        stream = self.hub.stream(to)
        stream.entries[self.hub.seq] = replace(message, ref=str(self.hub.seq))
        stream.arrived.set()

    async def receive(self) -> Control:
        stream = self.hub.stream(self.instance_id)
        while True:
            for seq, message in stream.entries.items():
                if seq > self._cursor:
                    self._cursor = seq
                    return message
            stream.arrived.clear()
            await stream.arrived.wait()

    async def ack(self, message: Control) -> None:
        self.hub.stream(self.instance_id).entries.pop(int(message.ref), None)

    async def note(self, name: str, values: Mapping[str, str], keep_s: float) -> None:
        self.hub.notes[name] = (dict(values), time.monotonic() + keep_s)

    async def notes(self, name: str) -> dict[str, str]:
        values, until = self.hub.notes.get(name, ({}, 0.0))
        return dict(values) if until > time.monotonic() else {}

    async def gate(self, name: str, ttl_s: float) -> float:
        now = time.monotonic()
        opens = self.hub.gates.get(name, 0.0)
        if opens > now:
            return opens - now
        self.hub.gates[name] = now + ttl_s
        return 0.0

    async def settle(self, name: str, value: str, keep_s: float) -> str:
        now = time.monotonic()
        kept, until = self.hub.settings.get(name, (value, 0.0))
        if until <= now:
            kept = value
        if kept == value:
            self.hub.settings[name] = (value, now + keep_s)
        return kept
