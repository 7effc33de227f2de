"""The loop-lag watchdog: an OS thread that proves the event loop is alive.

It pings the loop every `interval_ms`; lag over `warn_ms` logs `loop.lag` with the loop
thread's stack taken while it is stuck; a loop frozen for `fatal_s` exits 75 so systemd
restarts us. systemd's WATCHDOG=1 is sent only while the loop answers. A thread holding the GIL
starves this thread too: `hermes_gateway.liveness.sentinel` covers that case from another process.
"""

from __future__ import annotations

import asyncio
import os
import sys
import threading
import time
import traceback
from collections.abc import Callable

import structlog

from hermes_gateway.config import WatchdogConfig
from hermes_gateway.liveness.sdnotify import SystemdNotifier
from hermes_gateway.metrics import Metrics

log = structlog.get_logger("hermes.watchdog")
EXIT_RESTART = 75
THREAD_FRAMES = 4  # of each thread's stack in a freeze's dump: the innermost, where it waits


class LoopWatchdog:
    """Runs in its own thread from `start()` until `stop()`."""

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        config: WatchdogConfig,
        metrics: Metrics,
        notifier: SystemdNotifier,
        *,
        on_fatal: Callable[[], None] | None = None,
    ) -> None:
        self.loop = loop
        self.config = config
        self.metrics = metrics
        self.notifier = notifier
        self._on_fatal = on_fatal or self._exit
        self._stop = threading.Event()
        self._loop_thread_id = threading.get_ident()
        self._thread = threading.Thread(target=self._run, name="hermes-watchdog", daemon=True)
        self.last_lag = 0.0
        self.max_lag = 0.0
        self._samples: list[float] = []

    def start(self) -> None:
        """Call from the loop thread: that is the thread whose stack gets reported."""
        self._loop_thread_id = threading.get_ident()
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(2)

    def lag_percentile(self, q: float) -> float:
        samples = sorted(self._samples)
        if not samples:
            return 0.0
        return samples[min(len(samples) - 1, int(q * len(samples)))]

    def _run(self) -> None:
        interval = self.config.interval_ms / 1000
        while not self._stop.wait(interval):
            lag = self._ping()
            if lag is None:
                return
            self._record(lag)
            if self.notifier.enabled:
                self.notifier.notify("WATCHDOG=1")

    def _ping(self) -> float | None:
        """One round trip to the loop; None once we stop or exit.

        The lag is timed on the loop thread, when the ping runs: read here, after this thread
        wakes, it would also count this thread's own wait for the GIL behind the agent threads,
        which is not the loop's lag (under load that wait alone was several ms)."""
        answered = threading.Event()
        ran: list[float] = []

        def pong() -> None:
            ran.append(time.monotonic())
            answered.set()

        sent = time.monotonic()
        try:
            self.loop.call_soon_threadsafe(pong)
        except RuntimeError:  # loop closed: the gateway is shutting down
            return None
        warn = self.config.warn_ms / 1000
        if answered.wait(warn):
            return ran[0] - sent
        stack = self._loop_stack()
        log.warning("loop.lag", stalled_ms=round(warn * 1000), state="stalled", stack=stack)
        deadline = sent + self.config.fatal_s
        while not answered.wait(0.05):
            if self._stop.is_set():
                return None
            if time.monotonic() >= deadline:
                log.critical(
                    "loop.frozen",
                    seconds=self.config.fatal_s,
                    stack=self._loop_stack(),
                    threads=_all_stacks(),
                    exit_code=EXIT_RESTART,
                )
                self._on_fatal()
                return None
        lag = ran[0] - sent
        log.warning("loop.lag", lag_ms=round(lag * 1000, 1), state="recovered")
        return lag

    def _record(self, lag: float) -> None:
        self.last_lag = lag
        self.max_lag = max(self.max_lag, lag)
        self.metrics.loop_lag.observe(lag)
        self.metrics.loop_lag_last.set(lag)
        self._samples.append(lag)
        if len(self._samples) > 3000:
            del self._samples[:1000]

    def _loop_stack(self) -> str:
        frame = sys._current_frames().get(self._loop_thread_id)
        if frame is None:
            return ""
        return "".join(traceback.format_stack(frame, limit=25))

    def _exit(self) -> None:
        # the loop is wedged: no clean shutdown is possible; give the log writer a moment
        self.notifier.notify("STOPPING=1")
        time.sleep(0.2)
        os._exit(EXIT_RESTART)


def _all_stacks() -> str:
    """Every thread's innermost frames, ours (``hermes-*``) first: the loop is often waiting
    on one of them (a lock, a queue). The log keeps 4 KB of a field, and a gateway has tens of
    threads (pools, the store's writer), so each gets the few frames that say what it does."""
    names = {t.ident: t.name for t in threading.enumerate()}
    frames = sorted(
        sys._current_frames().items(),
        key=lambda item: not str(names.get(item[0], "")).startswith("hermes"),
    )
    return "\n".join(
        f"Thread {names.get(ident, ident)}:\n"
        + "".join(traceback.format_stack(frame, limit=THREAD_FRAMES))
        for ident, frame in frames
    )
