"""What keeping many session leases costs the coordination store: one renewal call per round
for all of them, one release call at a stop, whatever their number; a lease whose session
another instance took (a newer fencing token) is still found lost in that one call. On the
in-process hub and on Redis alike."""

from __future__ import annotations

from typing import Any, cast

from hermes_gateway.cluster.keeping import Keeping
from hermes_gateway.cluster.lease import Coordinator, Lease
from hermes_gateway.core.sessions import Pending
from tests.hermes_gateway.cluster.conftest import Make

LEASE_S = 1.5
SESSIONS = 300


class Counting:
    """A coordinator that counts the lease calls it passes on (each one round trip)."""

    def __init__(self, inner: Coordinator) -> None:
        self.inner = inner
        self.calls: list[tuple[str, int]] = []  # (method, leases in the call)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    async def renew(self, lease: Lease) -> Lease | None:
        self.calls.append(("renew", 1))
        return await self.inner.renew(lease)

    async def renew_all(self, leases: list[Lease]) -> list[Lease | None]:
        self.calls.append(("renew_all", len(leases)))
        return await self.inner.renew_all(leases)

    async def release(self, lease: Lease) -> None:
        self.calls.append(("release", 1))
        await self.inner.release(lease)

    async def release_all(self, leases: list[Lease]) -> None:
        self.calls.append(("release_all", len(leases)))
        await self.inner.release_all(leases)


class Runner:
    """The sessions all busy (their leases are renewed, not let go)."""

    def __init__(self) -> None:
        self.lost: list[str] = []

    def knows(self, key: str, inbox_id: int) -> bool:
        return False

    def idle(self, key: str) -> bool:
        return False

    def extend(self, key: str, until: float) -> None:
        pass

    def relinquish(self, key: str) -> list[Pending]:
        self.lost.append(key)
        return []


async def test_a_round_renews_every_lease_in_one_call_and_a_stop_releases_them_in_one(
    make: Make,
) -> None:
    a, b = await make("a", LEASE_S), await make("b", LEASE_S)
    counting = Counting(a)
    keeping = Keeping(
        cast(Coordinator, counting), lambda k: False, lambda k: False, lambda dropped: None
    )
    runner = Runner()
    keeping.bind(runner)
    keys = [f"telegram:dm:{n}" for n in range(SESSIONS)]
    for key in keys:
        lease = await a.acquire(key)
        assert lease is not None
        keeping.hold(key, lease)
    # another instance takes one session over (its lease ran out here): a newer token
    await a.release(keeping.leases[keys[7]])
    taken = await b.acquire(keys[7])
    assert taken is not None and taken.token > keeping.leases[keys[7]].token
    await keeping.keep()  # one round
    assert counting.calls == [("renew_all", SESSIONS)]
    assert runner.lost == [keys[7]]
    assert sorted(keeping.leases) == sorted(keys[:7] + keys[8:])
    counting.calls.clear()
    await keeping.close()
    assert counting.calls == [("release_all", SESSIONS - 1)]
    assert [await b.owner(k) for k in keys[:10]] == [None] * 7 + ["b", None, None]


async def test_status_lists_a_page_of_the_leases_and_counts_them_all() -> None:
    """`/status` with a thousand sessions held here: their number, and the first page of them
    with the seconds their leases have left (not a walk over every lease per request)."""
    from hermes_gateway.cluster import ownership
    from hermes_gateway.cluster.local import LocalCoordinator
    from hermes_gateway.store.store import Store

    coordinator = LocalCoordinator("a", LEASE_S)
    owner = ownership.Ownership(
        coordinator,
        cast(Store, None),  # status reads no store
        cast(Any, None),
        cast(Any, None),
        lambda key: False,
        max_age_s=60.0,
    )
    owner.keeping.bind(Runner())
    keys = [f"telegram:dm:{n}" for n in range(1_000)]
    for key in keys:
        lease = await coordinator.acquire(key)
        assert lease is not None
        owner.keeping.hold(key, lease)
    status = owner.status()
    assert status["owned_count"] == 1_000
    assert list(status["owned"]) == keys[: ownership.OWNED_SHOWN]
    assert all(0 < left <= LEASE_S for left in status["owned"].values())
    await owner.keeping.close()
