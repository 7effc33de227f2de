"""Slack Socket Mode in a cluster: eleven gateways on one Redis and one fake Slack app open ten
sockets between them (Slack's limit per app), the eleventh stands by, ready and able to send,
and takes the slot a stopped instance gives back."""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from hermes_gateway.server import Gateway
from tests.fakes.openai import FakeOpenAI
from tests.fakes.slack import FakeSlack
from tests.harness import eventually, make_config
from tests.redis_server import SERVER, needs_redis

pytestmark = [needs_redis]
INSTANCES = 11


@pytest.fixture
def slack() -> Iterator[FakeSlack]:
    with FakeSlack(app_token="xapp-1-A0FAKEAPP-1-abc") as fake:
        yield fake


@contextlib.asynccontextmanager
async def gateways(
    tmp_path: Path, llm: FakeOpenAI, slack: FakeSlack, n: int
) -> AsyncIterator[list[Gateway]]:
    """``n`` instances (ids unique to the test) on one SQLite store, each with Slack over
    Socket Mode; started one after the other."""
    suffix = uuid.uuid4().hex[:8]
    started: list[Gateway] = []
    try:
        for i in range(n):
            home = tmp_path / f"i{i}"
            home.mkdir()
            section = {"enabled": True, "bot_token": slack.bot_token, "allow_all": True}
            section.update(app_token=slack.app_token, api_base=slack.api_base)
            config = make_config(
                home,
                llm.base_url,
                platforms={"slack": {**section, "ping_interval_s": 0.5, "progress": "none"}},
                store={"url": f"sqlite+aiosqlite:///{tmp_path / 'state.db'}"},
                cluster={"redis_url": SERVER, "instance_id": f"i{i}-{suffix}", "lease_s": 2},
            )
            gateway = Gateway(config)
            await gateway.startup()
            started.append(gateway)
        yield started
    finally:
        for gateway in reversed(started):
            await gateway.shutdown()


def details(gateways: list[Gateway]) -> list[str]:
    return [g.adapters["slack"].health().detail for g in gateways]


async def test_eleven_instances_open_ten_sockets_and_the_eleventh_takes_a_freed_slot(
    tmp_path: Path, fake_llm: FakeOpenAI, slack: FakeSlack
) -> None:
    async with gateways(tmp_path, fake_llm, slack, INSTANCES) as every:
        await eventually(lambda: slack.live_connections == 10, timeout=30)
        await eventually(lambda: details(every).count("socket connected") == 10, timeout=30)
        [standby] = [g for g in every if "stand-by" in g.adapters["slack"].health().detail]
        ready, reasons = standby.vitals.readiness()
        assert ready, reasons  # a stand-by serves: it sends the replies of its sessions
        roles = standby.vitals.status()["cluster"]["roles"]
        assert [r["leading"] for r in roles.values()] == [False]
        leaders = {
            g.vitals.status()["cluster"]["roles"]["slack:A0FAKEAPP:socket"]["lease"]
            for g in every
            if g is not standby
        }
        assert leaders == {f"slack:A0FAKEAPP:socket:{n}" for n in range(10)}
        gone = next(g for g in every if g is not standby)
        await gone.shutdown()  # gives its slot back
        every.remove(gone)
        await eventually(
            lambda: standby.adapters["slack"].health().detail == "socket connected", timeout=15
        )
        await eventually(lambda: slack.live_connections == 10, timeout=15)
        assert details(every).count("socket connected") == 10
    assert slack.peak_connections == 10  # never an eleventh socket
    assert slack.connections == 11
