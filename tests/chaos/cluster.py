"""A cluster under test: several `hermes gateway run` processes on one PostgreSQL database and
one Redis, Slack over HTTP events (the fake Slack posts each event to a live instance, and to
another one when that fails, as Slack retries), the fake model; instances are SIGKILLed and
started again with a new instance id, as a host that dies and comes back does."""

from __future__ import annotations

import asyncio
import contextvars
import os
import random
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import httpx
import pytest
from aiohttp import web

from tests.chaos.kit import TOKEN_RE, tokens_in
from tests.e2e.daemon import GatewayProcess
from tests.fakes.openai import FakeOpenAI
from tests.fakes.slack import FakeSlack, make_message_event
from tests.redis_server import RedisProcess
from tests.security import keys

POSTGRES = os.environ.get("HERMES_TEST_POSTGRES", "")  # e.g. hermes@/?host=/tmp/hermes-pg
_POSTER: contextvars.ContextVar[str] = contextvars.ContextVar("poster", default="")


class ChaosSlack(FakeSlack):
    """`FakeSlack` whose Web API is also served under ``/i/<instance>/api/``: each gateway gets
    its own base URL, so every posted message records which instance posted it, and when."""

    def __init__(self) -> None:
        super().__init__(bot_token=keys.SLACK_BOT_TOKEN)
        self.app.router.add_route("*", "/i/{instance}/api/{method}", self._per_instance)

    def api_base_for(self, instance: str) -> str:
        return f"{self.url}/i/{instance}/api/"

    async def _per_instance(self, request: web.Request) -> web.Response:
        _POSTER.set(request.match_info["instance"])
        return await self._api(request)

    def _post_message(self, params: dict[str, Any]) -> dict[str, Any]:
        answer = super()._post_message(params)
        self.posted[-1].update(poster=_POSTER.get(), at=time.monotonic())
        return answer


@contextmanager
def postgres_database() -> Iterator[str]:
    """A database of the test's own on the PostgreSQL server CI starts; its store URL."""
    if not POSTGRES:
        pytest.skip("set HERMES_TEST_POSTGRES (CI does)")
    import asyncpg

    user, _, rest = POSTGRES.partition("@")
    host = rest.split("host=", 1)[1]
    name = f"hermes_{uuid.uuid4().hex[:10]}"

    async def admin(sql: str) -> None:
        conn = await asyncpg.connect(user=user, host=host, database="postgres")
        try:
            await conn.execute(sql)
        finally:
            await conn.close()

    asyncio.run(admin(f"CREATE DATABASE {name}"))
    try:
        yield f"postgresql+asyncpg://{user}@/{name}?host={host}"
    finally:
        asyncio.run(admin(f"DROP DATABASE {name} WITH (FORCE)"))


@dataclass
class Node:
    """One instance slot: its home stays, each start is a new process with a new id."""

    name: str
    home: Path
    generation: int = 0
    proc: GatewayProcess | None = None
    ready: bool = False

    @property
    def instance_id(self) -> str:
        return f"{self.name}-g{self.generation}"


@dataclass
class ClusterSetup:
    store_url: str
    redis_url: str
    lease_s: float = 2.0
    workers: int = 8
    log_level: str = "info"


class Cluster:
    """The instances; `url_of` gives a ready one's control URL (None while it is down)."""

    def __init__(
        self, tmp: Path, setup: ClusterSetup, llm: FakeOpenAI, slack: ChaosSlack, n: int
    ) -> None:
        self.setup, self.llm, self.slack = setup, llm, slack
        self.nodes = [Node(f"n{i}", tmp / f"n{i}") for i in range(n)]
        self.users: list[str] = []
        self.stopping = False  # the run is ending: an instance still starting is stopped

    def config(self, node: Node) -> dict[str, Any]:
        s = self.setup
        return {
            "model": {"base_url": self.llm.base_url, "api_key": keys.MODEL_KEY, "max_retries": 0},
            "runner": {"workers": s.workers, "drain_timeout_s": 3, "stop_grace_s": 1},
            "store": {"url": s.store_url, "quarantine_after": 1000, "probation_calm_s": 0},
            "cluster": {
                "redis_url": s.redis_url,
                "instance_id": node.instance_id,
                "lease_s": s.lease_s,
            },
            "logging": {"format": "json", "level": s.log_level},
            "platforms": {
                "slack": {
                    "enabled": True,
                    "mode": "http",
                    "bot_token": keys.SLACK_BOT_TOKEN,
                    "signing_secret": keys.SLACK_SIGNING_SECRET,
                    "api_base": self.slack.api_base_for(node.instance_id),
                    "allowed_users": self.users,
                    "progress": "none",
                }
            },
        }

    def start(self, node: Node, wait: bool = True) -> None:
        node.generation += 1
        node.home.mkdir(parents=True, exist_ok=True)
        node.proc = GatewayProcess(node.home, self.config(node)).start(wait=False)
        if wait:
            self.wait_ready(node)

    def wait_ready(self, node: Node, timeout: float = 180) -> None:
        assert node.proc is not None
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert node.proc.proc is not None and node.proc.proc.poll() is None, node.proc.stderr()
            try:
                if httpx.get(f"{node.proc.url}/readyz", timeout=2).status_code == 200:
                    node.ready = True
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        raise AssertionError(f"{node.instance_id} not ready: {node.proc.stderr()}")

    def kill(self, node: Node) -> None:
        node.ready = False
        if node.proc is not None:
            node.proc.kill()

    def stop_all(self) -> list[int]:
        codes = []
        for node in self.nodes:
            node.ready = False
            proc = node.proc.proc if node.proc is not None else None
            if node.proc is not None and proc is not None and proc.poll() is None:
                proc.terminate()
                codes.append(node.proc.wait(30))
        return codes

    def kill_all(self) -> None:
        for node in self.nodes:
            self.kill(node)

    def live_urls(self) -> list[str]:
        return [n.proc.url for n in self.nodes if n.ready and n.proc is not None]

    def log_paths(self) -> list[Path]:
        return [*(p for n in self.nodes for p in keys.log_files(n.home))]


@contextmanager
def redis_and_postgres(tmp: Path) -> Iterator[tuple[str, str]]:
    """(store URL, Redis URL): a database of its own on the shared PostgreSQL, and a Redis
    server of the test's own (so leases and streams of other tests never mix in)."""
    redis = RedisProcess(tmp / "redis")
    redis.directory.mkdir(parents=True, exist_ok=True)
    with postgres_database() as store_url:
        redis.start()
        try:
            yield store_url, redis.url
        finally:
            redis.stop()


def session_of(body: dict[str, Any]) -> str | None:
    """The fake model's session key for a request: the chat its numbered messages come from."""
    for msg in body.get("messages") or []:
        if msg.get("role") == "user":
            found = TOKEN_RE.search(str(msg.get("content") or ""))
            if found:
                return f"c{found.group(1)}"
    return None


@dataclass
class Sent:
    token: str
    session: int
    at: float
    attempts: int = 0  # deliveries until an instance acked it (Slack's retries)
    acked: bool = False  # an instance answered 200: Slack holds it delivered
    statuses: list[str] = field(default_factory=list)  # what each delivery got


@dataclass
class Traffic:
    """Numbered messages from ``sessions`` Slack DMs, each sent to a random ready instance;
    a session sends its next message once the last one was answered."""

    cluster: Cluster
    sessions: int
    pause: tuple[float, float] = (0.0, 0.5)
    patience: float = 120.0
    seed: int = 0
    sent: list[Sent] = field(default_factory=list)
    answered: dict[str, float] = field(default_factory=dict)  # token: first answer's time
    stopping: threading.Event = field(default_factory=threading.Event)  # no new messages
    closing: threading.Event = field(default_factory=threading.Event)  # no more deliveries
    _scanned: int = 0  # posts already scanned for answers
    _scanning: threading.Lock = field(default_factory=threading.Lock)

    def channel(self, session: int) -> str:
        return f"D{session:04d}"

    def user(self, session: int) -> str:
        return f"U{session:04d}"

    def start(self) -> threading.Thread:
        self.cluster.users[:] = [self.user(i) for i in range(1, self.sessions + 1)]
        thread = threading.Thread(target=lambda: asyncio.run(self._run()), daemon=True)
        thread.start()
        return thread

    def scan(self) -> None:
        """Record the answers posted since the last scan (the posts are only appended to)."""
        posted = self.cluster.slack.posted
        with self._scanning:
            fresh, self._scanned = posted[self._scanned : len(posted)], len(posted)
            for msg in fresh:
                for token in tokens_in(msg):
                    self.answered.setdefault(token, msg.get("at", time.monotonic()))

    def unanswered(self) -> list[Sent]:
        self.scan()
        return [s for s in self.sent if s.token not in self.answered]

    async def _run(self) -> None:
        timeout = aiohttp.ClientTimeout(total=3)  # Slack gives an app 3 s to ack
        async with aiohttp.ClientSession(timeout=timeout) as http:
            rng = random.Random(self.seed)
            await asyncio.gather(
                *(
                    self._chat(http, i, random.Random(rng.random()))
                    for i in range(1, self.sessions + 1)
                )
            )

    async def _chat(self, http: aiohttp.ClientSession, session: int, rng: random.Random) -> None:
        await asyncio.sleep(rng.uniform(0, 2))  # not all at once
        n = 0
        while not self.stopping.is_set():
            n += 1
            sent = Sent(f"#c{session}-m{n}", session, time.monotonic())
            self.sent.append(sent)
            await self._deliver(http, sent, f"{sent.token} please answer", rng)
            # the next message once this one is answered (it was only seen at kills before)
            while sent.token not in self.answered and time.monotonic() - sent.at < self.patience:
                if self.stopping.is_set():
                    return
                await asyncio.sleep(0.05)
                self.scan()
            await asyncio.sleep(rng.uniform(*self.pause))

    async def _deliver(
        self, http: aiohttp.ClientSession, sent: Sent, text: str, rng: random.Random
    ) -> None:
        """POST the signed event to ready instances until one acks it with 200: a dead or
        starting one fails and the next try (a Slack retry, same event id) goes elsewhere.
        Retries go on after the traffic stops (`stopping`), as Slack's would, until `closing`."""
        slack = self.cluster.slack
        event = make_message_event(
            text,
            self.user(sent.session),
            self.channel(sent.session),
            slack.next_ts(),
            channel_type="im",
        )
        payload = slack.event_callback(event)
        while not self.closing.is_set():
            urls = self.cluster.live_urls()
            if urls:
                body, headers = slack._signed(
                    payload, signing_secret=keys.SLACK_SIGNING_SECRET, retry_attempt=sent.attempts
                )
                sent.attempts += 1
                try:
                    url = f"{rng.choice(urls)}/slack/events"
                    async with http.post(url, data=body, headers=headers) as resp:
                        sent.statuses.append(str(resp.status))
                        if resp.status == 200:
                            sent.acked = True
                            return
                except (aiohttp.ClientError, TimeoutError) as exc:
                    sent.statuses.append(type(exc).__name__)
            await asyncio.sleep(0.2)
