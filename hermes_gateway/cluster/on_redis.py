"""The `Coordinator` on Redis (redis-py's asyncio client): leases as hashes with an expiry made
and kept by Lua scripts (`scripts.py`), the control channel as one stream per instance read
through a consumer group, so what a crashed reader did not acknowledge is read again."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Mapping
from typing import Any, TypeVar

import structlog
from redis.asyncio import Redis
from redis.backoff import NoBackoff
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError
from redis.retry import Retry

from hermes_gateway.cluster import scripts
from hermes_gateway.cluster.lease import Control, Held, Kind, Lease, Survey, held
from hermes_gateway.errors import CoordinationUnavailable

log = structlog.get_logger("hermes.cluster")
T = TypeVar("T")
_DOWN = (RedisConnectionError, RedisTimeoutError, OSError, TimeoutError)
GROUP = "owner"
STREAM_MAX = 10_000  # messages kept per instance (approximate trim)
STREAM_TTL_S = 86_400  # an instance gone for good: its stream goes a day after the last message
_SURVEYED = ("instance", "session", "leader")  # the key kinds `survey` reads
RENEW_BATCH = 1000  # leases renewed or released by one script call (Redis runs it without a break)
BLOCK_MS = 1000  # a reader's wait per round trip; a message arriving ends it at once


class RedisCoordinator:
    """`Coordinator` on one Redis server; every call is bounded by a third of the lease."""

    def __init__(self, url: str, instance_id: str, lease_s: float, prefix: str = "hermes:") -> None:
        self.instance_id = instance_id
        self.lease_s = lease_s
        self.prefix = prefix
        self._timeout = max(lease_s / 3, 0.2)
        # no retries inside the client: a call that fails says so now, the caller decides
        options: dict[str, Any] = {
            "socket_timeout": self._timeout,
            "socket_connect_timeout": self._timeout,
            "retry": Retry(NoBackoff(), 0),
        }
        self._redis = Redis.from_url(url, **options)
        reader = {**options, "socket_timeout": BLOCK_MS / 1000 + self._timeout}
        self._reader = Redis.from_url(url, **reader)
        self._acquire = self._redis.register_script(scripts.ACQUIRE)
        self._renew = self._redis.register_script(scripts.RENEW)
        self._release = self._redis.register_script(scripts.RELEASE)
        self._gate = self._redis.register_script(scripts.GATE)
        self._settle = self._redis.register_script(scripts.SETTLE)
        self._available = False
        self._stream = f"{prefix}ctl:{instance_id}"
        self._backlog: list[Control] = []
        # first what a reader before us with this id took and did not ack, from this id on
        self._pending_from: str | None = "0"

    @property
    def available(self) -> bool:
        return self._available

    async def start(self) -> None:
        """Make this instance's stream and group; raises `CoordinationUnavailable`."""
        try:
            await self._call(self._redis.xgroup_create(self._stream, GROUP, "0", mkstream=True))
        except ResponseError as exc:  # BUSYGROUP: made by an earlier process with this id
            if "BUSYGROUP" not in str(exc):
                raise

    async def close(self) -> None:
        await self._redis.aclose()
        await self._reader.aclose()

    async def _call(self, call: Awaitable[T], timeout: float | None = None) -> T:
        try:
            async with asyncio.timeout(timeout or self._timeout):
                result = await call
        except _DOWN as exc:
            if self._available:
                log.error("cluster.unavailable", error=f"{type(exc).__name__}: {exc}")
            self._available = False
            raise CoordinationUnavailable(f"Redis: {type(exc).__name__}: {exc}") from exc
        if not self._available:
            log.warning("cluster.available", instance=self.instance_id)
        self._available = True
        return result

    def _key(self, kind: Kind, key: str) -> str:
        return f"{self.prefix}{kind}:{key}"

    async def acquire(self, key: str) -> Lease | None:
        return await self._take("session", key)

    async def lead(self, role: str) -> Lease | None:
        return await self._take("leader", role)

    async def _take(self, kind: Kind, key: str) -> Lease | None:
        started = time.monotonic()
        ttl = int(self.lease_s * 1000)
        keys = [self._key(kind, key), f"{self.prefix}fence"]
        granted, value = await self._call(self._acquire(keys=keys, args=[self.instance_id, ttl]))
        if not granted:
            return None
        return Lease(kind, key, self.instance_id, int(value), started + self.lease_s)

    async def renew(self, lease: Lease) -> Lease | None:
        [renewed] = await self.renew_all([lease])
        return renewed

    async def renew_all(self, leases: list[Lease]) -> list[Lease | None]:
        renewed: list[Lease | None] = []
        ttl = int(self.lease_s * 1000)
        for at in range(0, len(leases), RENEW_BATCH):
            started = time.monotonic()
            batch = leases[at : at + RENEW_BATCH]
            keys = [self._key(lease.kind, lease.key) for lease in batch]
            args = [self.instance_id, ttl, *(str(lease.token) for lease in batch)]
            answers = await self._call(self._renew(keys=keys, args=args))
            renewed += [
                lease.extended(started + self.lease_s) if ok else None
                for lease, ok in zip(batch, answers, strict=True)
            ]
        return renewed

    async def release(self, lease: Lease) -> None:
        await self.release_all([lease])

    async def release_all(self, leases: list[Lease]) -> None:
        for at in range(0, len(leases), RENEW_BATCH):
            batch = leases[at : at + RENEW_BATCH]
            keys = [self._key(lease.kind, lease.key) for lease in batch]
            args = [self.instance_id, *(str(lease.token) for lease in batch)]
            await self._call(self._release(keys=keys, args=args))

    async def owner(self, key: str) -> str | None:
        return await self._holder("session", key)

    async def leader(self, role: str) -> str | None:
        return await self._holder("leader", role)

    async def _holder(self, kind: Kind, key: str) -> str | None:
        found = await self._call(self._redis.hget(self._key(kind, key), "owner"))
        return None if found is None else found.decode()

    async def beat(self) -> None:
        key = f"{self.prefix}instance:{self.instance_id}"
        await self._call(self._redis.set(key, "1", px=int(3 * self.lease_s * 1000)))

    async def survey(self) -> Survey:
        return await self._call(self._survey(), 3 * self._timeout)

    async def _survey(self) -> Survey:
        found = [k async for k in self._redis.scan_iter(match=f"{self.prefix}*", count=1000)]
        names = [k.decode()[len(self.prefix) :].split(":", 1) for k in found]
        wanted = [(n[0], n[1]) for n in names if len(n) == 2 and n[0] in _SURVEYED]
        pipe = self._redis.pipeline(transaction=False)
        pipe.time()
        for kind, key in wanted:  # each key's type is known from its name: no WRONGTYPE
            full = f"{self.prefix}{kind}:{key}"
            pipe.pttl(full)
            if kind == "instance":
                pipe.exists(full)  # a placeholder: answers come in pairs
            else:
                pipe.hmget(full, "owner", "token")
        answers = await pipe.execute()
        seconds, micros = answers[0]
        now_us, gone = int(seconds) * 1_000_000 + int(micros), 3 * self.lease_s
        instances: dict[str, float] = {}
        leases: list[Held] = []
        for (kind, key), ttl_ms, fields in zip(wanted, answers[1::2], answers[2::2], strict=True):
            if ttl_ms < 0:
                continue  # expired since the scan
            if kind == "instance":
                instances[key] = max(0.0, gone - ttl_ms / 1000)
            elif fields[0] is not None:
                token = int(fields[1])
                leases.append(held(kind, key, fields[0].decode(), token, now_us, ttl_ms / 1000))
        return Survey(instances, leases)

    async def send(self, to: str, message: Control) -> None:
        stream = f"{self.prefix}ctl:{to}"
        pipe = self._redis.pipeline(transaction=True)
        pipe.xadd(stream, {"m": message.encode()}, maxlen=STREAM_MAX, approximate=True)
        pipe.expire(stream, STREAM_TTL_S)
        await self._call(pipe.execute())

    async def receive(self) -> Control:
        while not self._backlog:
            self._backlog = await self._read()
        return self._backlog.pop(0)

    async def _read(self) -> list[Control]:
        start = self._pending_from or ">"
        block = None if self._pending_from else BLOCK_MS
        read = self._reader.xreadgroup(GROUP, "c", {self._stream: start}, count=100, block=block)
        try:
            found = await self._call(read, BLOCK_MS / 1000 + self._timeout)
        except ResponseError as exc:  # NOGROUP: Redis lost its data; make them again
            if "NOGROUP" not in str(exc):
                raise
            await self.start()
            return []
        entries = [(ref, fields) for _, batch in found or [] for ref, fields in batch]
        if self._pending_from is not None:
            # the backlog of a reader before us: done when a read finds nothing after it
            self._pending_from = entries[-1][0].decode() if entries else None
        return [Control.decode(fields[b"m"], ref.decode()) for ref, fields in entries]

    async def ack(self, message: Control) -> None:
        await self._call(self._redis.xack(self._stream, GROUP, message.ref))

    async def note(self, name: str, values: Mapping[str, str], keep_s: float) -> None:
        key = f"{self.prefix}note:{name}"
        pipe = self._redis.pipeline(transaction=True)  # readers see the old map or the new
        pipe.delete(key)
        if values:
            pipe.hset(key, mapping=dict(values))
            pipe.pexpire(key, max(1, int(keep_s * 1000)))
        await self._call(pipe.execute())

    async def notes(self, name: str) -> dict[str, str]:
        found = await self._call(self._redis.hgetall(f"{self.prefix}note:{name}"))
        return {k.decode(): v.decode() for k, v in found.items()}

    async def gate(self, name: str, ttl_s: float) -> float:
        keys, ttl = [f"{self.prefix}gate:{name}"], max(1, int(ttl_s * 1000))
        shut_ms = await self._call(self._gate(keys=keys, args=[self.instance_id, ttl]))
        return int(shut_ms) / 1000

    async def settle(self, name: str, value: str, keep_s: float) -> str:
        keys, ttl = [f"{self.prefix}setting:{name}"], max(1, int(keep_s * 1000))
        kept = await self._call(self._settle(keys=keys, args=[value, ttl]))
        return kept.decode() if isinstance(kept, bytes) else str(kept)
