"""Whether the database answers: the circuit that fails store calls at once while the database
is known to be stuck (held by another process), unreachable (a PostgreSQL server stopped or
gone silent) or unable to write (`writes.py`), and the probes that close it again."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Awaitable, Callable

import structlog
from sqlalchemy.exc import DBAPIError

from hermes_gateway.errors import StoreError
from hermes_gateway.store.writes import WriteGate, WriteProbe, cannot_write

log = structlog.get_logger("hermes.store")
Probe = Callable[[], Awaitable[None]]


def is_unreachable(exc: BaseException) -> bool:
    """A failure to reach the server (refused, reset, timed out, shutting down), as opposed to a
    statement the server refused. asyncpg raises OSError and TimeoutError from `connect`
    unwrapped; SQLAlchemy marks a connection lost mid-call as invalidated."""
    if isinstance(exc, OSError):  # TimeoutError and ConnectionError included
        return True
    if isinstance(exc, DBAPIError):
        if exc.connection_invalidated:
            return True
        state = str(getattr(exc.orig, "sqlstate", "") or "")
        # 08: connection exception; 57P0x: shutting down, crashed, starting up
        return state.startswith("08") or state.startswith("57P")
    return False


def describe(exc: BaseException) -> str:
    """A short one-line account of ``exc`` (the driver's error rather than SQLAlchemy's SQL)."""
    orig = getattr(exc, "orig", None) or exc
    text = str(orig).strip().splitlines()[0] if str(orig).strip() else ""
    return f"{orig.__class__.__name__}: {text}"[:200] if text else orig.__class__.__name__


class StoreCircuit:
    """Stuck: a write waited `stuck_after_s` and still failed (another process held the
    database past its lock timeout): the next writes fail at once for `stuck_pause_s`, instead of
    each waiting the whole timeout in turn while no user gets an answer.

    Unreachable: the server refused, dropped or did not answer a connection. Every call fails at
    once (no user waits on a dead server), and ``probe`` is tried every `probe_every_s` until it
    answers, which closes the circuit: writes resume within a second of the server's return. A
    call still running after `suspect_after_s` triggers the probe too: on a server gone silent
    it would otherwise hang with no timeout at all, and every write queued behind it."""

    stuck_after_s = 1.0
    stuck_pause_s = 10.0
    suspect_after_s = 1.0
    probe_every_s = 1.0
    probe_timeout_s = 3.0

    def __init__(self, probe: Probe | None, write_probe: WriteProbe | None = None) -> None:
        self._probe = probe  # None (SQLite): a file is never "unreachable"
        self._stuck_until = 0.0
        self._stuck_error = ""
        self.down_since: float | None = None
        self._down_error = ""
        self._prober: asyncio.Task[None] | None = None
        self._watched: set[asyncio.Timeout] = set()
        self.writes = WriteGate(write_probe)  # the probe: a real write, once the store is open

    @property
    def writable(self) -> bool:
        """Whether a new message can be stored now (intake stops taking them when not)."""
        stuck = time.monotonic() < self._stuck_until
        return self.writes.open.is_set() and self.down_since is None and not stuck

    async def wait_writable(self) -> None:
        """Return once a new message can be stored (woken by whichever probe reopens it)."""
        while not self.writable:
            if not self.writes.open.is_set():
                await self.writes.open.wait()
            else:  # unreachable or stuck: the circuit's own probe or pause ends it
                await asyncio.sleep(0.25)

    @property
    def problem(self) -> str | None:
        """What is wrong with the store right now, for `/readyz`; None when nothing is."""
        if (problem := self.writes.problem) is not None:
            return problem
        if self.down_since is not None:
            seconds = time.monotonic() - self.down_since
            return f"database unreachable for {seconds:.0f} s ({self._down_error})"
        if time.monotonic() < self._stuck_until:
            return f"writes paused: the database is stuck ({self._stuck_error})"
        return None

    def check(self, *, write: bool = True) -> float:
        """Raise at once while the database is known to be down (or stuck, for a write);
        else the start time."""
        now = time.monotonic()
        if self.down_since is not None:
            raise StoreError(
                f"store call skipped: the database is unreachable ({self._down_error}); "
                f"checking it every {self.probe_every_s:g} s"
            )
        if write and now < self._stuck_until:
            raise StoreError(
                f"store write skipped: the database is unavailable ({self._stuck_error}); "
                f"trying it again in {self._stuck_until - now:.0f} s"
            )
        return now

    def wrote(self) -> None:
        """A write succeeded: a store that could not write can again."""
        if not self.writes.open.is_set():
            self.writes.reopen("a write succeeded")

    def failed(self, exc: BaseException, started: float, what: str = "write") -> StoreError:
        """The StoreError for ``exc``. A server out of reach is probed at once (a connection
        dropped alone costs nothing more); a write that waited long for nothing pauses writes."""
        if self._probe is not None and is_unreachable(exc):
            self._start_probing(wait_first=False)
        elif what == "write" and (reason := cannot_write(exc)) is not None:
            self.writes.close(reason, describe(exc))
        elif what == "write" and time.monotonic() - started >= self.stuck_after_s:
            self._stuck_until = time.monotonic() + self.stuck_pause_s
            self._stuck_error = describe(exc)
        return StoreError(f"store {what} failed: {describe(exc)}")

    @contextlib.asynccontextmanager
    async def watch(self) -> AsyncIterator[None]:
        """Bound a call on a server that may have gone silent: past `suspect_after_s` the probe
        runs, and if the server does not answer it either, the call ends in TimeoutError."""
        if self._probe is None:
            yield
            return
        async with asyncio.timeout(None) as deadline:
            self._watched.add(deadline)
            loop = asyncio.get_running_loop()
            timer = loop.call_later(self.suspect_after_s, self._start_probing, False)
            try:
                yield
            finally:
                timer.cancel()
                self._watched.discard(deadline)

    def _start_probing(self, wait_first: bool) -> None:
        if self._prober is None or self._prober.done():
            self._prober = asyncio.create_task(self._probe_until_back(wait_first), name="probe")

    async def _probe_until_back(self, wait_first: bool) -> None:
        while True:
            if wait_first:
                await asyncio.sleep(self.probe_every_s)
            wait_first = True
            error = await self._try_probe()
            if error is None:
                if self.down_since is not None:
                    seconds = time.monotonic() - self.down_since
                    self.down_since = None
                    log.warning("store.recovered", down_s=round(seconds, 1))
                return
            self._mark_down(error)

    def _mark_down(self, exc: BaseException) -> None:
        if self.down_since is None:
            self.down_since = time.monotonic()
            self._down_error = describe(exc)
            # one line per outage; each call it fails logs its own (with the session it cost)
            log.error("store.unreachable", error=self._down_error, probe_every_s=self.probe_every_s)
        now = asyncio.get_running_loop().time()
        for deadline in list(self._watched):  # calls hanging on the silent server: end them
            if not deadline.expired():
                deadline.reschedule(now)

    async def _try_probe(self) -> BaseException | None:
        assert self._probe is not None
        try:
            async with asyncio.timeout(self.probe_timeout_s):
                await self._probe()
        except TimeoutError:
            return TimeoutError(f"no answer within {self.probe_timeout_s:g} s")
        except Exception as exc:  # whatever the driver raises, the answer is "not reachable"
            return exc
        return None

    async def close(self) -> None:
        await self.writes.aclose()
        if self._prober is not None:
            self._prober.cancel()
            await asyncio.gather(self._prober, return_exceptions=True)
            self._prober = None
