"""`Roles`: the singleton work (a role, or one of its numbered slots) and the intake split
(shares) this process leads: all of it in one process, through leader leases in a cluster."""

from __future__ import annotations

from typing import Any

from hermes_gateway.cluster.leadership import ClusterLeader, SoleLeader
from hermes_gateway.cluster.lease import Coordinator
from hermes_gateway.cluster.shares import ClusterShares, SoleShares
from hermes_gateway.platforms.adapter import Leadership, Shares


class Roles:
    """``coordinator``: the cluster's (None: one process). Keeps what it hands out, for
    `/status`."""

    def __init__(self, coordinator: Coordinator | None) -> None:
        self.coordinator = coordinator
        self.leaders: dict[str, ClusterLeader] = {}  # singleton work led through the cluster
        self.shared: dict[str, ClusterShares] = {}  # intake split over the cluster (shards)

    @property
    def clustered(self) -> bool:
        return self.coordinator is not None

    def leadership(self, role: str, slots: int = 0) -> Leadership:
        """One process leads every role; in a cluster a leader lease decides, one of ``slots``
        numbered ones if given."""
        if self.coordinator is None:
            return SoleLeader(role)
        leader = self.leaders.get(role)
        if leader is None:
            leader = self.leaders[role] = ClusterLeader(self.coordinator, role, slots)
        return leader

    def shares(self, role: str, count: int) -> Shares:
        """One process serves every part; in a cluster each part is a leader lease."""
        if self.coordinator is None:
            return SoleShares(count)
        old = self.shared.get(role)
        for n in range(old.count if old is not None else 0):  # asked again with another count
            self.leaders.pop(f"{role}:{n}", None)
        shares = self.shared[role] = ClusterShares(self.coordinator, role, count, self._leader)
        return shares

    def _leader(self, role: str) -> ClusterLeader:
        assert self.coordinator is not None
        leader = self.leaders[role] = ClusterLeader(self.coordinator, role)
        return leader

    def status(self) -> dict[str, Any]:
        leading = {role: leader.status() for role, leader in self.leaders.items()}
        shares = {role: shared.status() for role, shared in self.shared.items()}
        return {"roles": leading, "shares": shares}
