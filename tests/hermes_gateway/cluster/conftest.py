"""Coordinators for the contract tests: several "instances" on one in-process hub, or on the
test Redis (HERMES_TEST_REDIS) under a key prefix of the test's own."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Awaitable, Callable

import pytest

from hermes_gateway.cluster.lease import Coordinator
from hermes_gateway.cluster.local import LocalCoordinator, LocalHub
from tests.redis_server import SERVER

Make = Callable[[str, float], Awaitable[Coordinator]]


@pytest.fixture(params=["local", "redis"])
async def make(request: pytest.FixtureRequest) -> AsyncIterator[Make]:
    """``await make(instance_id, lease_s)``: a started coordinator; closed after the test."""
    if request.param == "redis" and not SERVER:
        pytest.skip("set HERMES_TEST_REDIS (CI does)")
    hub, prefix, made = LocalHub(), f"t{uuid.uuid4().hex[:12]}:", []

    async def build(instance_id: str, lease_s: float) -> Coordinator:
        coordinator: Coordinator
        if request.param == "local":
            coordinator = LocalCoordinator(instance_id, lease_s, hub)
        else:
            from hermes_gateway.cluster.on_redis import RedisCoordinator

            coordinator = RedisCoordinator(SERVER, instance_id, lease_s, prefix=prefix)
        await coordinator.start()
        made.append(coordinator)
        return coordinator

    yield build
    for coordinator in made:
        await coordinator.close()
