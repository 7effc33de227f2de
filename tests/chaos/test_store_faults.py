"""Store faults: the database locked by another process, read-only, or out of space. The user
still gets an answer, the error is logged clearly, the gateway keeps running, nothing is
half-written (a turn and its inbox entries are one transaction), and it recovers by itself.

In-process the faults are injected at the SQLite level (the same error codes the OS conditions
produce: SQLITE_BUSY, SQLITE_READONLY, SQLITE_FULL); the slow suite also fills a real tmpfs
under a daemon in its own mount namespace."""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import event
from structlog.testing import capture_logs

from hermes_gateway.server import Gateway
from hermes_gateway.store.engine import StoreEngine
from tests.chaos.kit import record
from tests.e2e.daemon import GatewayProcess
from tests.fakes.openai import FakeOpenAI
from tests.harness import make_config, running_gateway
from tests.security import keys

BIG = "x" * 20_000  # needs fresh pages: a full database cannot take it


@contextlib.asynccontextmanager
async def sqlite_fault(gw: Gateway, fault: tuple[str, str]) -> AsyncIterator[None]:
    """Every connection of the gateway's store runs ``fault[0]`` while this lasts (``fault[1]``
    undoes it): the pooled ones through a connect hook, and the long-lived connection of the
    SQLite fast path (`hermes_gateway/store/sqlite.py`) directly."""
    pragma, undo = fault
    engine = gw.store._engine
    assert engine is not None

    def on_connect(dbapi_conn: Any, _record: Any) -> None:
        cur = dbapi_conn.cursor()
        cur.execute(pragma)
        cur.close()

    fast = getattr(getattr(gw.store, "_fast", None), "_db", None)
    event.listen(engine.sync_engine, "connect", on_connect)
    await engine.dispose()  # pooled connections go: the next ones get the fault
    if fast is not None:
        await fast.execute(pragma)
    try:
        yield
    finally:
        event.remove(engine.sync_engine, "connect", on_connect)
        await engine.dispose()
        if fast is not None:
            await fast.execute(undo)


def page_count(db: Path) -> int:
    with contextlib.closing(sqlite3.connect(db)) as conn:
        return int(conn.execute("PRAGMA page_count").fetchone()[0])


def stored_texts(db: Path, copy_to: Path | None = None) -> list[str]:
    """The message texts stored in ``db``; ``copy_to``: read a copy there (SQLite resolves
    /proc/PID/root to our own mount namespace, so a daemon's tmpfs must be copied out)."""
    if copy_to is not None:
        for suffix in ("", "-wal"):
            source = db.parent / f"{db.name}{suffix}"
            if source.exists():
                shutil.copyfile(source, copy_to.parent / f"{copy_to.name}{suffix}")
        db = copy_to
    with contextlib.closing(sqlite3.connect(db)) as conn:
        return [c for (c,) in conn.execute("SELECT content FROM messages ORDER BY id")]


def turns_are_whole(db: Path) -> list[str]:
    """Problems with the stored turns: a run with a user message and no answer (or the other
    way round), an inbox entry settled by a run whose messages are missing."""
    problems = []
    with contextlib.closing(sqlite3.connect(db)) as conn:
        runs = conn.execute(
            "SELECT run_id, group_concat(role) FROM messages GROUP BY run_id"
        ).fetchall()
        for run_id, roles in runs:
            if roles.split(",")[0] != "user" or roles.split(",")[-1] != "assistant":
                problems.append(f"run {run_id}: {roles}")
        stored = {r for r, _ in runs}
        for inbox_id, run_id in conn.execute(
            "SELECT id, run_id FROM inbox WHERE status IN ('done', 'answered') AND run_id != ''"
        ):
            if run_id not in stored:
                problems.append(f"inbox {inbox_id} settled by run {run_id} with no messages")
    return problems


FAULTS = {
    "disk full": (
        lambda db: (
            f"PRAGMA max_page_count = {page_count(db)}",
            "PRAGMA max_page_count = 2147483646",
        ),
        "full",
    ),
    "read-only": (lambda db: ("PRAGMA query_only = ON", "PRAGMA query_only = OFF"), "readonly"),
}


@pytest.mark.parametrize("fault", list(FAULTS))
async def test_a_failing_store_still_answers_and_recovers(
    tmp_path: Path, llm: FakeOpenAI, fault: str
) -> None:
    pragma, word = FAULTS[fault]
    config = make_config(tmp_path, llm.base_url, model={"api_key": keys.MODEL_KEY})
    db = config.home_path / "state.db"
    async with running_gateway(config) as (gw, client):
        before = await client.chat("before the fault", user="s")
        with capture_logs() as logs:
            async with sqlite_fault(gw, pragma(db)):
                during = await client.chat(f"during the fault {BIG}", user="s")
                health, _ = await client.get("/healthz")
        after = await client.chat("after the fault", user="s")
    errors = [e for e in logs if e["log_level"] == "error"]
    async with running_gateway(config) as (_, client):  # the restart reads the store
        history = [m["content"] for m in await client.history("s")]
    record(
        f"store_{_slug(fault)}",
        {
            "fault": fault,
            "answered_during": during["text"] is not None and during["text"].startswith("echo:"),
            "errors_logged": sorted({e["event"] for e in errors}),
            "half_written_turns": len(turns_are_whole(db)),
        },
    )
    assert [before["status"], during["status"], after["status"]] == [200, 200, 200]
    assert during["text"] == f"echo: during the fault {BIG}"  # the user still got the answer
    assert health == 200
    assert {e["event"] for e in errors} >= {"inbox.write_failed", "run.persist_failed"}
    assert all(word in e["error"] for e in errors), errors
    assert turns_are_whole(db) == []
    # the turn taken while the store failed was never written, not half-written
    assert history == [
        "before the fault",
        "echo: before the fault",
        "after the fault",
        "echo: after the fault",
    ]


class Locker:
    """Another process's write transaction on the database (``BEGIN IMMEDIATE``), held for
    ``seconds`` or until the block ends. An async context manager: the gateway under test
    runs on this loop, so nothing here may block it."""

    def __init__(self, db: Path, seconds: float) -> None:
        self.db, self.seconds = db, seconds
        self.held = threading.Event()
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        conn = sqlite3.connect(self.db, isolation_level=None, timeout=30)
        try:
            conn.execute("BEGIN IMMEDIATE")
            self.held.set()
            self._done.wait(self.seconds)
            conn.execute("ROLLBACK")
        finally:
            conn.close()

    async def __aenter__(self) -> Locker:
        self._thread.start()
        await asyncio.to_thread(self.held.wait, 10)
        assert self.held.is_set(), "could not take the write lock"
        return self

    async def __aexit__(self, *exc: object) -> None:
        self._done.set()
        await asyncio.to_thread(self._thread.join, 10)


async def test_a_database_locked_for_a_while_delays_but_loses_nothing(
    tmp_path: Path, llm: FakeOpenAI
) -> None:
    config = make_config(tmp_path, llm.base_url, model={"api_key": keys.MODEL_KEY})
    db = config.home_path / "state.db"
    async with running_gateway(config) as (_, client):
        await client.chat("first", user="s")
        with capture_logs() as logs:
            async with Locker(db, 1.5):
                started = time.monotonic()
                during = await client.chat("while another process writes", user="s")
                seconds = time.monotonic() - started
        history = [m["content"] for m in await client.history("s")]
    with contextlib.closing(sqlite3.connect(db)) as conn:
        statuses = [s for (s,) in conn.execute("SELECT status FROM inbox ORDER BY id")]
    record(
        "store_locked_briefly",
        {
            "fault": "database locked by another process for 1.5 s",
            "answered_after_s": round(seconds, 2),
            "errors_logged": [],
        },
    )
    assert during["text"] == "echo: while another process writes"
    assert seconds >= 1.0  # it waited for the lock (SQLite's busy timeout) instead of failing
    assert statuses == ["answered", "answered"]
    assert history[-1] == "echo: while another process writes"
    assert [e for e in logs if e["log_level"] == "error"] == []


async def test_a_database_locked_past_the_busy_timeout_holds_up_one_write_not_all(
    tmp_path: Path, llm: FakeOpenAI, monkeypatch: pytest.MonkeyPatch
) -> None:
    """While another process held the write lock, every write waited SQLite's whole busy
    timeout (30 s) in turn, one after the other: nobody got an answer until the lock went.
    Now one write waits it out; the others fail at once for a while, and the users get their
    answers (not stored, and logged as such)."""

    monkeypatch.setattr(StoreEngine, "lock_wait_s", 1.0)  # SQLite's busy timeout
    config = make_config(tmp_path, llm.base_url, model={"api_key": keys.MODEL_KEY})
    db = config.home_path / "state.db"
    async with running_gateway(config) as (_, client):
        await client.chat("first", user="u0")
        with capture_logs() as logs:
            async with Locker(db, 8):
                started = time.monotonic()
                replies = await asyncio.gather(
                    *(client.chat(f"hello {i}", user=f"u{i}") for i in range(1, 5))
                )
                seconds = time.monotonic() - started
    errors = [e for e in logs if e["log_level"] == "error"]
    assert [r["text"] for r in replies] == [f"echo: hello {i}" for i in range(1, 5)]
    assert seconds < 4, f"the answers took {seconds:.1f} s"
    assert errors and all("locked" in e["error"] or "unavailable" in e["error"] for e in errors)


@pytest.mark.slow
@pytest.mark.timeout(300)
async def test_a_database_locked_past_the_busy_timeout_still_answers(
    tmp_path: Path, llm: FakeOpenAI
) -> None:
    config = make_config(tmp_path, llm.base_url, model={"api_key": keys.MODEL_KEY})
    db = config.home_path / "state.db"
    async with running_gateway(config) as (_, client):
        await client.chat("first", user="s")
        with capture_logs() as logs:
            async with Locker(db, 70):
                started = time.monotonic()
                first, *others = await asyncio.gather(
                    *(client.chat(f"while locked {i}", user=f"s{i}") for i in range(3))
                )
                seconds = time.monotonic() - started
                during = await client.chat("while the database is locked", user="s")
                quick = time.monotonic() - started - seconds
                health, _ = await client.get("/healthz")
        await asyncio.sleep(11)  # the store is tried again after its pause
        after = await client.chat("after the lock", user="s")
    errors = sorted({e["event"] for e in logs if e["log_level"] == "error"})
    record(
        "store_locked_long",
        {
            "fault": "database locked by another process for 70 s",
            "answered_after_s": round(seconds, 1),
            "next_answer_after_s": round(quick, 2),
            "errors_logged": errors,
            "half_written_turns": len(turns_are_whole(db)),
        },
    )
    assert [r["text"] for r in (first, *others)] == [f"echo: while locked {i}" for i in range(3)]
    assert seconds < 40  # one busy timeout (30 s), not one per write
    assert during["text"] == "echo: while the database is locked" and quick < 2
    assert health == 200 and after["text"] == "echo: after the lock"
    assert "inbox.write_failed" in errors
    assert turns_are_whole(db) == []


# -- a real full disk: a tiny tmpfs under a daemon in its own mount namespace ---------------


def _can_mount() -> list[str] | None:
    """The `unshare` prefix that gives a child its own mount namespace, or None."""
    if shutil.which("unshare") is None:
        return None
    for prefix in (["unshare", "-m"], ["unshare", "-rm"]):
        probe = subprocess.run(
            [*prefix, "sh", "-c", "mount -t tmpfs -o size=64k tmpfs /mnt"],
            capture_output=True,
            timeout=10,
        )
        if probe.returncode == 0:
            return prefix
    return None


class MountedGateway(GatewayProcess):
    """`hermes gateway run` with a tmpfs of ``size`` mounted on ``mount`` (its mount ns only)."""

    def __init__(
        self, home: Path, config: dict[str, Any], mount: Path, size: str, prefix: list[str]
    ):
        super().__init__(home, config)
        self.mount, self.size, self.prefix = mount, size, prefix

    def start(self, wait: bool = True) -> GatewayProcess:
        self.mount.mkdir(parents=True, exist_ok=True)
        self._stderr = self.stderr_path.open("ab")
        script = (
            f"mount -t tmpfs -o size={self.size} tmpfs {self.mount} && "
            f"exec {sys.executable} -m hermes_gateway gateway run --config {self.config_path}"
        )
        self.proc = subprocess.Popen(
            [*self.prefix, "sh", "-c", script],
            stdout=subprocess.DEVNULL,
            stderr=self._stderr,
            env=self.env,
        )
        if wait:
            self.wait_healthy()
        return self

    def inside(self, path: Path) -> Path:
        """``path`` as the gateway sees it (through its mount namespace)."""
        assert self.proc is not None
        return Path(f"/proc/{self.proc.pid}/root{path}")


@pytest.fixture
def mount_prefix() -> list[str]:
    prefix = _can_mount()
    if prefix is None:
        pytest.skip("no mount namespace here (unshare -m / -rm refused): cannot fake a full disk")
    return prefix


@pytest.mark.slow
@pytest.mark.e2e
def test_a_real_full_disk_under_the_daemon(
    tmp_path: Path, llm: FakeOpenAI, mount_prefix: list[str]
) -> None:
    home, disk = tmp_path / "home", tmp_path / "disk"
    config = {
        "model": {"base_url": llm.base_url, "api_key": keys.MODEL_KEY, "max_retries": 0},
        "store": {"url": f"sqlite+aiosqlite:///{disk}/state.db"},
    }
    gw = MountedGateway(home, config, disk, "1m", mount_prefix)
    try:
        gw.start()
        ok = gw.chat("before the disk fills").json()["choices"][0]["message"]["content"]
        filler = gw.inside(disk / "filler")
        with contextlib.suppress(OSError), filler.open("wb") as fh:  # until ENOSPC
            while True:
                fh.write(b"\0" * 65536)
        full = gw.chat(f"on a full disk {BIG}", user="e2e")
        health = httpx.get(f"{gw.url}/healthz", timeout=5).status_code
        filler.unlink()
        after = gw.chat("after some space came back").json()["choices"][0]["message"]["content"]
        stored = stored_texts(gw.inside(disk / "state.db"), tmp_path / "copy.db")
        gw.signal(signal.SIGTERM)
        code = gw.wait(15)
    finally:
        gw.kill()
    events = [e for e in gw.log_events() if e.get("level") == "error"]
    record(
        "store_tmpfs_full",
        {
            "fault": "a real 1 MB tmpfs, filled up",
            "answered_during": full.status_code == 200,
            "errors_logged": sorted({e["event"] for e in events}),
            "exit_code": code,
        },
    )
    assert ok == "echo: before the disk fills"
    assert full.status_code == 200
    assert full.json()["choices"][0]["message"]["content"] == f"echo: on a full disk {BIG}"
    assert health == 200 and after == "echo: after some space came back"
    assert any("full" in str(e.get("error")) for e in events), events
    # the turn taken on the full disk was never written, not half-written
    assert stored == [
        "before the disk fills",
        "echo: before the disk fills",
        "after some space came back",
        "echo: after some space came back",
    ]
    assert code == 0
    keys.assert_no_leaks(keys.log_files(home))


def _slug(name: str) -> str:
    return "".join(c if c.isalnum() else "_" for c in name.lower()).strip("_")
