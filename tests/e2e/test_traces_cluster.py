"""Traces across a cluster's hop: a local API request taken by one instance and carried to the
instance that runs its session is one trace, its `message` span on the first, its `run` (and
the model call under it) on the owner, both exporting to one collector and each naming itself
(`service.instance.id`)."""

from __future__ import annotations

import asyncio
import time
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.e2e.daemon import GatewayProcess
from tests.e2e.test_cluster_api import LEASE_S, ask, carried, owned
from tests.e2e.test_cluster_api import model as model  # fixture
from tests.e2e.test_cluster_api import store_url as store_url  # fixture
from tests.fakes.openai import FakeOpenAI
from tests.fakes.otlp import Receiver, attrs
from tests.redis_server import RedisProcess

pytest.importorskip("opentelemetry.sdk")
pytestmark = [pytest.mark.e2e]


def traced_instance(
    name: str, tmp: Path, llm: FakeOpenAI, store_url: str, redis_url: str, endpoint: str
) -> GatewayProcess:
    config: dict[str, Any] = {
        "model": {"base_url": llm.base_url, "api_key": "sk-fake", "max_retries": 0},
        "store": {"url": store_url},
        "cluster": {"redis_url": redis_url, "instance_id": name, "lease_s": LEASE_S},
        "runner": {"workers": 4, "drain_timeout_s": 3, "stop_grace_s": 1},
        "observability": {
            "traces": {"enabled": True, "endpoint": endpoint, "schedule_delay_s": 0.1}
        },
    }
    return GatewayProcess(tmp / name, config)


def instance_of(resource: Any) -> str:
    found = {kv.key: kv.value.string_value for kv in resource.attributes}
    return str(found["service.instance.id"])


def test_a_request_carried_to_its_owner_is_one_trace_across_both_instances(
    tmp_path: Path, model: FakeOpenAI, store_url: str, redis: RedisProcess, receiver: Receiver
) -> None:
    tag = uuid.uuid4().hex[:6]
    a_name, b_name = f"a-{tag}", f"b-{tag}"
    a = traced_instance(a_name, tmp_path, model, store_url, redis.url, receiver.endpoint)
    b = traced_instance(b_name, tmp_path, model, store_url, redis.url, receiver.endpoint)
    user = f"s0-{tag}"
    said = f"{user} carried through b"
    try:
        a.start()
        b.start()
        got = asyncio.run(_carried(a, b, user, said))
        assert got["status"] == 200 and got["text"] == f"answer to {said}", got
        assert carried(b, user) == 1
        spans = _wait_for_owner_run(receiver, b_name, a_name)
    finally:
        a.kill()
        b.kill()
    message, run, calls = spans
    assert run.trace_id == message.trace_id
    assert run.parent_span_id == message.span_id  # the owner's run continues b's message
    assert all(c.trace_id == message.trace_id and c.parent_span_id == run.span_id for c in calls)
    assert calls
    with receiver.lock:
        everything = " ".join(str(attrs(s)) + s.name for _r, s in receiver.spans)
    assert "carried through" not in everything and user not in everything


async def _carried(a: GatewayProcess, b: GatewayProcess, user: str, said: str) -> Any:
    """A request that a runs, then one of the same session sent to b (carried to a)."""
    async with httpx.AsyncClient(timeout=60) as http:
        first = asyncio.create_task(ask(http, a, user, f"{user} first, on a"))
        while f"api:dm:{user}" not in await owned(http, a):  # a takes the session
            await asyncio.sleep(0.02)
        got = await ask(http, b, user, said)
        await first
    return got


def _wait_for_owner_run(
    receiver: Receiver, taker: str, owner: str, timeout: float = 30
) -> tuple[Any, Any, list[Any]]:
    """b's `message` span of the carried request, a's `run` in its trace, and its model calls."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with receiver.lock:
            spans = list(receiver.spans)
        messages = [s for r, s in spans if s.name == "message" and instance_of(r) == taker]
        for message in messages:
            same = [(r, s) for r, s in spans if s.trace_id == message.trace_id]
            runs = [s for r, s in same if s.name == "run" and instance_of(r) == owner]
            calls = [s for r, s in same if s.name == "model.call" and instance_of(r) == owner]
            if runs and calls:
                return message, runs[0], calls
        time.sleep(0.1)
    raise AssertionError(f"no run of b's message on a: {[s.name for _r, s in spans]}")
