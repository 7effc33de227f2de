"""Two `hermes gateway run` processes on one PostgreSQL database and one Redis, both serving the
local API behind "one address" (requests go to either): a request whose session the other
instance runs is carried there and answered on its own connection, streamed too, with the API's
`queue` policy applied as on one process; an owner killed mid-request is taken over."""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
import re
import signal
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.chaos.cluster import postgres_database
from tests.e2e.daemon import GatewayProcess
from tests.fakes.openai import FakeOpenAI, Response, last_user_text, text
from tests.redis_server import RedisProcess

pytestmark = [pytest.mark.e2e]
LEASE_S = 3
SESSION_RE = re.compile(r"\b(s\d+-[0-9a-f]{6})\b")


@pytest.fixture
def store_url() -> Iterator[str]:
    with postgres_database() as url:
        yield url


@pytest.fixture
def model(fake_llm: FakeOpenAI) -> Iterator[FakeOpenAI]:
    """Answers each request with its own last message, after a while (so requests of one
    session queue up), and logs two requests of one session in flight at once."""
    rng = random.Random(7)

    def answer(body: dict[str, Any]) -> Response:
        said = last_user_text(body)
        # pieces 20 ms apart, as a model streams: deltas that come at once are sent as one
        return text(
            f"answer to {said}", delay=rng.uniform(0.2, 0.5), chunk_size=6, chunk_delay=0.02
        )

    fake_llm.responder = answer
    fake_llm.session_of = _session_of
    fake_llm.overlaps.clear()
    yield fake_llm
    fake_llm.session_of = None


def _session_of(body: dict[str, Any]) -> str | None:
    for message in body.get("messages") or []:
        if message.get("role") == "user" and (found := SESSION_RE.search(str(message["content"]))):
            return found.group(1)
    return None


def instance(
    name: str, tmp: Path, llm: FakeOpenAI, store_url: str, redis_url: str
) -> GatewayProcess:
    config: dict[str, Any] = {
        "model": {"base_url": llm.base_url, "api_key": "sk-fake", "max_retries": 0},
        "store": {"url": store_url},
        "cluster": {"redis_url": redis_url, "instance_id": name, "lease_s": LEASE_S},
        "runner": {"workers": 4, "drain_timeout_s": 3, "stop_grace_s": 1},
    }
    return GatewayProcess(tmp / name, config)


async def ask(
    http: httpx.AsyncClient, gateway: GatewayProcess, user: str, said: str, stream: bool = False
) -> dict[str, Any]:
    """One chat request as `hermes chat` makes it; the status, the text, and its pieces."""
    body = {"user": user, "stream": stream, "messages": [{"role": "user", "content": said}]}
    url = f"{gateway.url}/v1/chat/completions"
    async with http.stream("POST", url, json=body) as response:
        raw = await response.aread()
    if response.status_code != 200 or not stream:
        data = httpx.Response(response.status_code, content=raw).json()
        content = data["choices"][0]["message"]["content"] if response.status_code == 200 else None
        return {"status": response.status_code, "text": content, "body": data, "pieces": []}
    pieces = []
    for line in raw.decode().splitlines():
        if line.startswith("data: {"):
            chunk = httpx.Response(200, content=line[6:]).json()
            for choice in chunk["choices"]:
                if piece := choice["delta"].get("content"):
                    pieces.append(piece)
    return {"status": 200, "text": "".join(pieces), "body": None, "pieces": pieces}


def carried(gateway: GatewayProcess, user: str = "") -> int:
    """Requests this instance carried to their session's owner (for ``user``'s session)."""
    events = gateway.log_events()
    return sum(1 for e in events if e["event"] == "api.carried" and user in e["session_key"])


async def owned(http: httpx.AsyncClient, gateway: GatewayProcess) -> dict[str, float]:
    response = await http.get(f"{gateway.url}/status", headers=gateway.operator)
    return dict(response.json()["cluster"]["owned"])


def test_any_instance_answers_any_request_through_the_owner(
    tmp_path: Path, model: FakeOpenAI, store_url: str, redis: RedisProcess
) -> None:
    tag = uuid.uuid4().hex[:6]
    a = instance(f"a-{tag}", tmp_path, model, store_url, redis.url)
    b = instance(f"b-{tag}", tmp_path, model, store_url, redis.url)
    try:
        a.start()
        b.start()
        answers, streamed = asyncio.run(_traffic(a, b, tag))
    finally:
        a.kill()
        b.kill()
    wrong = [
        (said, got)
        for said, got in answers
        if got["status"] != 200 or got["text"] != f"answer to {said}"
    ]
    assert wrong == [], (wrong, a.stderr(), b.stderr())
    assert len(answers) == 24
    assert model.overlaps == []  # no two runs of one session at once, on either instance
    assert carried(a) + carried(b) >= 6  # half the requests landed away from their owner
    said, got = streamed
    assert got["status"] == 200 and got["text"] == f"answer to {said}", got
    assert len(got["pieces"]) > 1  # streamed from the owner, piece by piece
    assert carried(b, f"s9-{tag}") == 1  # b carried it to a


async def _traffic(
    a: GatewayProcess, b: GatewayProcess, tag: str
) -> tuple[list[tuple[str, dict[str, Any]]], tuple[str, dict[str, Any]]]:
    """Four requests for each of six sessions, all at once, alternately to a and b; then a
    streaming request for a session a runs, sent to b."""
    async with httpx.AsyncClient(timeout=60) as http:
        jobs = []
        for n in range(24):
            user, said = f"s{n % 6}-{tag}", f"s{n % 6}-{tag} question {n} {uuid.uuid4().hex}"
            # each session's requests alternate between the instances, and so do its first ones
            jobs.append((said, ask(http, (a, b)[(n + n // 6) % 2], user, said)))
        got = await asyncio.gather(*(job for _, job in jobs))
        answers = [(said, answer) for (said, _), answer in zip(jobs, got, strict=True)]
        user = f"s9-{tag}"
        first = asyncio.create_task(ask(http, a, user, f"{user} first, on a"))
        while f"api:dm:{user}" not in await owned(http, a):  # a takes the session
            await asyncio.sleep(0.02)
        said = f"{user} streamed through b"
        streamed = await ask(http, b, user, said, stream=True)
        await first
    return answers, (said, streamed)


def test_a_request_carried_to_an_owner_that_dies_mid_stream_is_answered_by_the_next(
    tmp_path: Path, model: FakeOpenAI, store_url: str, redis: RedisProcess
) -> None:
    """A streaming request carried to a waits its turn there, and a is SIGKILLed while it
    streams the answer: b, which took the request, takes the session over once the lease runs
    out, runs the message again and sends its answer whole after what was streamed (which
    cannot be taken back), on the same connection, with no second stream mixed in."""
    tag = uuid.uuid4().hex[:6]
    a = instance(f"a-{tag}", tmp_path, model, store_url, redis.url)
    b = instance(f"b-{tag}", tmp_path, model, store_url, redis.url)
    user = f"s0-{tag}"
    slow = "a slow answer streamed from the owner until it dies, " * 4
    model.push(text("first", delay=1.5), text(slow, chunk_size=4, chunk_delay=0.3))
    try:
        a.start()
        b.start()
        said, pieces = asyncio.run(_killed(a, b, user))
    finally:
        a.kill()
        b.kill()
    streamed, _, answer = "".join(pieces).partition("\n\n")
    assert streamed and slow.startswith(streamed), (pieces, b.stderr())
    assert answer == f"answer to {said}", pieces
    assert model.overlaps == []


async def _killed(a: GatewayProcess, b: GatewayProcess, user: str) -> tuple[str, list[str]]:
    said, pieces = f"{user} carried, then its owner died", []
    body = {"user": user, "stream": True, "messages": [{"role": "user", "content": said}]}

    async def read(http: httpx.AsyncClient) -> int:
        async with http.stream("POST", f"{b.url}/v1/chat/completions", json=body) as response:
            async for line in response.aiter_lines():
                if line.startswith("data: {"):
                    for choice in json.loads(line[6:])["choices"]:
                        if piece := choice["delta"].get("content"):
                            pieces.append(piece)
        return response.status_code

    async with httpx.AsyncClient(timeout=60) as http:
        first = asyncio.create_task(ask(http, a, user, f"{user} first, on a"))
        while f"api:dm:{user}" not in await owned(http, a):
            await asyncio.sleep(0.02)
        reading = asyncio.create_task(read(http))
        while len(pieces) < 2 and not reading.done():  # a streams it: b passes it on
            await asyncio.sleep(0.02)
        assert a.proc is not None
        a.proc.send_signal(signal.SIGKILL)
        assert await reading == 200
        with contextlib.suppress(httpx.HTTPError):
            await first
    return said, pieces
