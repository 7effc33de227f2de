"""The coordination seam: what a lease and a control message are, and the `Coordinator`
protocol both implementations (in-process, Redis) keep."""

from __future__ import annotations

import json
import time
import uuid
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, replace
from typing import Any, Literal, Protocol

from hermes_gateway.store.fence import Fence

Kind = Literal["session", "leader"]
ControlKind = Literal["interrupt", "steer", "stop", "queued"]


@dataclass(frozen=True, slots=True)
class Lease:
    """Exclusive use of ``key`` (a session key, or a role such as "telegram-poller:BOT") until
    ``deadline`` (this process's monotonic clock, counted from before the request went out, so
    never later than the coordination store's own expiry). ``token`` grows with every new
    holder of a key: the store refuses session writes under an older one."""

    kind: Kind
    key: str
    owner: str
    token: int
    deadline: float

    @property
    def live(self) -> bool:
        return time.monotonic() < self.deadline

    @property
    def fence(self) -> Fence:
        return Fence(self.key, self.token)

    def extended(self, deadline: float) -> Lease:
        return replace(self, deadline=deadline)


@dataclass(frozen=True, slots=True)
class Control:
    """A message for the instance that runs a session: interrupt or stop its run, steer text
    into it, or a notice that a message for it waits in the inbox (the inbox stays the truth:
    a lost notice costs latency, never the message). ``id`` makes handling idempotent across
    redelivery; ``ref`` is the transport's delivery reference, set on receipt for `ack`."""

    kind: ControlKind
    session_key: str
    text: str = ""
    inbox_id: int | None = None
    sender: str = ""
    hops: int = 0  # times passed on already: the owner changed on the way
    id: str = field(default_factory=lambda: uuid.uuid4().hex)
    ref: str = ""

    def encode(self) -> str:
        data = asdict(self)
        data.pop("ref")
        return json.dumps(data)

    @classmethod
    def decode(cls, raw: str | bytes, ref: str) -> Control:
        return cls(**json.loads(raw), ref=ref)


@dataclass(frozen=True, slots=True)
class Held:
    """One lease as the coordination store holds it (for `/status`): its age is counted from
    its token, which is the store's clock at the grant (approximately: the counter may lead)."""

    kind: Kind
    key: str
    owner: str
    age_s: float
    left_s: float


@dataclass(frozen=True, slots=True)
class Survey:
    """The whole cluster as the coordination store sees it: each live instance with the
    seconds since its last heartbeat, and every lease."""

    instances: dict[str, float]
    leases: list[Held]

    def as_dict(self) -> dict[str, Any]:
        sessions: dict[str, int] = dict.fromkeys(self.instances, 0)
        for held in self.leases:
            if held.kind == "session":
                sessions[held.owner] = sessions.get(held.owner, 0) + 1
        return {
            "instances": {
                name: {"heartbeat_s": round(self.instances.get(name, -1.0), 1), "sessions": n}
                for name, n in sorted(sessions.items())
            },
            "leaders": {
                h.key: {"owner": h.owner, "age_s": round(h.age_s, 1), "left_s": round(h.left_s, 1)}
                for h in sorted(self.leases, key=lambda h: h.key)
                if h.kind == "leader"
            },
        }


def held(kind: Kind, key: str, owner: str, token: int, now_us: int, left_s: float) -> Held:
    return Held(kind, key, owner, max(0.0, (now_us - token) / 1e6), max(0.0, left_s))


class Coordinator(Protocol):
    """Session ownership, leader election and the control channel. A call that cannot reach
    the coordination store raises `CoordinationUnavailable` (and `available` turns False until
    a call succeeds again); nothing is ever reported held that the store did not grant."""

    instance_id: str
    lease_s: float

    @property
    def available(self) -> bool: ...

    async def start(self) -> None: ...

    async def close(self) -> None: ...

    async def acquire(self, key: str) -> Lease | None:
        """The session's lease for this instance (its own again if it holds it), or None
        while another instance holds it."""

    async def lead(self, role: str) -> Lease | None:
        """The leader lease of ``role`` for this instance, or None while another holds it."""

    async def renew(self, lease: Lease) -> Lease | None:
        """The lease extended by `lease_s`, or None: it expired and may be another's now."""

    async def renew_all(self, leases: list[Lease]) -> list[Lease | None]:
        """`renew` of each lease (all this instance's), in one round trip to the store."""

    async def release(self, lease: Lease) -> None:
        """Give the lease up (nothing happens if it is no longer this holder's)."""

    async def release_all(self, leases: list[Lease]) -> None:
        """`release` of each lease (all this instance's), in one round trip to the store."""

    async def owner(self, key: str) -> str | None:
        """The instance holding the session's lease, if any."""

    async def leader(self, role: str) -> str | None:
        """The instance holding the role's leader lease, if any."""

    async def beat(self) -> None:
        """Say this instance is alive (for `survey`); it counts as gone after 3 leases."""

    async def survey(self) -> Survey:
        """Every live instance and every lease in the cluster (a scan: for `/status`)."""

    async def send(self, to: str, message: Control) -> None:
        """Queue ``message`` for instance ``to``, in order after what this sender sent it."""

    async def receive(self) -> Control:
        """The next message for this instance (waits for one): at least once, in order; an
        unacknowledged message comes again to the next reader with this instance id."""

    async def ack(self, message: Control) -> None:
        """``message`` was handled: it is not delivered again."""

    async def note(self, name: str, values: Mapping[str, str], keep_s: float) -> None:
        """Replace the small map kept under ``name`` for whichever instance reads it next (a
        shard's newest message ids); it is dropped ``keep_s`` after its last write."""

    async def notes(self, name: str) -> dict[str, str]:
        """The map kept under ``name`` (empty if none)."""

    async def gate(self, name: str, ttl_s: float) -> float:
        """Pass the cluster-wide gate ``name``, which then stays shut for ``ttl_s``: 0.0 if
        this call passed, else the seconds until it opens (another instance passed it)."""

    async def settle(self, name: str, value: str, keep_s: float) -> str:
        """The cluster's value of the setting ``name``: the first writer's (``value`` if none
        is kept). A caller whose value it is keeps it ``keep_s`` longer; one whose value
        differs changes nothing."""


class Seen:
    """The ids of the last control messages handled, so a redelivered one is skipped."""

    def __init__(self, size: int = 4096) -> None:
        self._ids: OrderedDict[str, None] = OrderedDict()
        self._size = size

    def first_time(self, message: Control) -> bool:
        if message.id in self._ids:
            return False
        self._ids[message.id] = None
        if len(self._ids) > self._size:
            self._ids.popitem(last=False)
        return True


def next_token(last: int, now_us: int) -> int:
    """A token above every one issued before, even by a coordination store that lost its data
    since: the counter's next value or the clock in microseconds, whichever is larger."""
    return max(last + 1, now_us)
