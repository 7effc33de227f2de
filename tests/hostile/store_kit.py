"""Helpers for the store-outage tests: a tmpfs in a mount namespace of its own with a gateway
running in it, a read-only switch for a running store, and readers of the inbox and `/readyz`."""

from __future__ import annotations

import asyncio
import contextlib
import json
import shutil
import sqlite3
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
from sqlalchemy import event

from hermes_gateway.server import Gateway
from tests.e2e.daemon import GatewayProcess
from tests.fakes.server import wait_until
from tests.harness import Client


class MountNamespace:
    """A process holding a mount namespace with a tmpfs of ``size`` on ``path``."""

    def __init__(self, path: Path, size: str) -> None:
        path.mkdir(parents=True, exist_ok=True)
        self.path = path
        script = f"mount -t tmpfs -o size={size} tmpfs {path} && exec sleep 600"
        self.proc = subprocess.Popen(["unshare", "-m", "sh", "-c", script])
        mounts = Path(f"/proc/{self.proc.pid}/mountinfo")
        wait_until(lambda: self.proc.poll() is None and f" {path} " in mounts.read_text())

    def inside(self, path: Path) -> Path:
        """``path`` as seen in the namespace."""
        return Path(f"/proc/{self.proc.pid}/root{path}")

    def fill(self) -> Path:
        filler = self.inside(self.path / "filler")
        with contextlib.suppress(OSError), filler.open("wb") as fh:  # until ENOSPC
            while True:
                fh.write(b"\0" * 65536)
        return filler

    def close(self) -> None:
        self.proc.kill()
        self.proc.wait(10)


class NamespacedGateway(GatewayProcess):
    """The gateway run inside ``ns`` (nsenter), so its home is the tmpfs."""

    def __init__(self, ns: MountNamespace, config: dict[str, Any]) -> None:
        super().__init__(ns.path, config)
        self.ns = ns

    def start(self, wait: bool = True) -> GatewayProcess:
        self._stderr = self.stderr_path.open("ab")
        command = [sys.executable, "-m", "hermes_gateway", "gateway", "run"]
        command += ["--config", str(self.config_path)]
        self.proc = subprocess.Popen(
            ["nsenter", "-t", str(self.ns.proc.pid), "-m", "--", *command],
            stdout=subprocess.DEVNULL,
            stderr=self._stderr,
            env=self.env,
        )
        if wait:
            self.wait_healthy()
        return self

    def log_events(self) -> list[dict[str, Any]]:
        path = self.ns.inside(self.home / "logs" / "gateway.log")
        lines = path.read_text(errors="replace").splitlines()
        return [json.loads(line) for line in lines if line.startswith("{")]

    def readyz(self) -> tuple[int, list[str]]:
        r = httpx.get(f"{self.url}/readyz", timeout=5)
        return r.status_code, list(r.json().get("reasons", []))


def inbox(ns: MountNamespace, copy: Path) -> list[tuple[str, str]]:
    """(status, text) of every inbox entry (a copy: SQLite would resolve /proc/PID/root in
    our own mount namespace)."""
    for suffix in ("", "-wal"):
        source = ns.inside(ns.path / f"state.db{suffix}")
        if source.exists():
            shutil.copyfile(source, f"{copy}{suffix}")
    return inbox_of(copy)


def inbox_of(db: Path) -> list[tuple[str, str]]:
    with contextlib.closing(sqlite3.connect(db)) as conn:
        rows = conn.execute("SELECT status, payload FROM inbox ORDER BY id").fetchall()
    return [(status, json.loads(payload)["text"]) for status, payload in rows]


# -- in the process: a read-only database, a deleted database file ---------------------------
# A real read-only remount is refused while the gateway holds its database open for writing
# (EBUSY), so read-only is made at the SQLite level, as the OS condition reports it
# (SQLITE_READONLY), on every connection of the running store.


@contextlib.asynccontextmanager
async def read_only(gw: Gateway) -> AsyncIterator[None]:
    engine = gw.store._engine
    assert engine is not None

    def on_connect(dbapi_conn: Any, _record: Any) -> None:
        dbapi_conn.execute("PRAGMA query_only = ON")

    fast = getattr(gw.store._fast, "_db", None)
    event.listen(engine.sync_engine, "connect", on_connect)
    await engine.dispose()  # pooled connections go: the next ones are read-only
    if fast is not None:
        await fast.execute("PRAGMA query_only = ON")
    try:
        yield
    finally:
        event.remove(engine.sync_engine, "connect", on_connect)
        await engine.dispose()
        if fast is not None:
            await fast.execute("PRAGMA query_only = OFF")


async def reasons(client: Client) -> list[str]:
    status, body = await client.get("/readyz")
    return [] if status == 200 else list(body["reasons"])


async def not_ready(client: Client, timeout: float = 10.0) -> list[str]:
    """The `/readyz` reasons once it answers 503."""
    deadline = time.monotonic() + timeout
    while not (why := await reasons(client)):
        assert time.monotonic() < deadline, "/readyz stayed 200"
        await asyncio.sleep(0.05)
    return why
