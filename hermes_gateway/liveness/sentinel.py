"""The sentinel: the loop's liveness judged from outside the GIL, by a small watcher process.

The loop beats into a pipe; faulthandler (C, no GIL needed) is armed to dump every thread's
stack into a second pipe on `FREEZE_SIGNAL`. When the beats stop for `fatal_s` plus a grace
that lets the in-process watchdog exit 75 first, the watcher takes the dump, logs
`loop.frozen` with it and SIGKILLs the gateway: the case where a thread holds the GIL and
neither the loop nor the watchdog thread can run. An operator's `DUMP_SIGNAL` is answered on
the loop, in Python (`stacks.dumped`).
"""

from __future__ import annotations

import asyncio
import contextlib
import faulthandler
import fcntl
import os
import signal
import subprocess
import sys
import threading
import time
import traceback
from pathlib import Path

import structlog

from hermes_gateway.config import Config, WatchdogConfig

log = structlog.get_logger("hermes.sentinel")
DUMP_SIGNAL = signal.SIGUSR2  # an operator's "where is it?": answered without a kill
# the watcher's, for a frozen loop only: faulthandler's dump walks the threads from a signal
# handler without a lock, and crashes the process (SIGSEGV) when a thread ends meanwhile; an
# operator's signal must never risk that, a gateway about to be killed anyway may
FREEZE_SIGNAL = signal.SIGRTMIN + 1
WATCHER = Path(__file__).with_name("sentinel_watch.py")
DUMP_PIPE_BYTES = 1 << 20  # faulthandler's worst case (100 threads x 100 frames) fits
RESPAWN_EVERY_S = 10.0


def grace_s(config: WatchdogConfig) -> float:
    """How long after `fatal_s` the watcher waits: the watchdog thread's own exit 75 comes up
    to one ping interval plus its 0.2 s flush after `fatal_s`, and the last beat up to one
    interval before the freeze; one second more absorbs scheduling noise."""
    return 1.0 + 2 * config.interval_ms / 1000


class Sentinel:
    """`start()` and `stop()` on the loop thread: the watcher dies with the thread that
    spawned it (PR_SET_PDEATHSIG), and the loop thread lives as long as the gateway."""

    def __init__(
        self, loop: asyncio.AbstractEventLoop, config: WatchdogConfig, log_path: Path | None
    ) -> None:
        self.loop = loop
        self.config = config
        self.log_path = log_path
        self.proc: subprocess.Popen[bytes] | None = None
        self._beat_fd = -1
        self._dump_fd = -1
        self._timer: asyncio.TimerHandle | None = None
        self._started_at = -RESPAWN_EVERY_S
        self._by_hand = False

    @classmethod
    def for_config(cls, loop: asyncio.AbstractEventLoop, config: Config) -> Sentinel:
        """Its `loop.frozen` line goes where `hermes_gateway.logs` writes, and to stderr."""
        log_path = config.home_path / "logs" / "gateway.log" if config.logging.file else None
        return cls(loop, config.watchdog, log_path)

    def start(self) -> None:
        """Spawn the watcher: a fork and exec, a few ms on the loop thread."""
        if not self._by_hand:
            with contextlib.suppress(ValueError, RuntimeError):  # a loop off the main thread
                self.loop.add_signal_handler(DUMP_SIGNAL, self.dump_by_hand)
                self._by_hand = True
        beat_r, self._beat_fd = os.pipe()
        dump_r, self._dump_fd = os.pipe()
        # never block the loop on a slow watcher, nor a signal handler on a full pipe
        os.set_blocking(self._beat_fd, False)
        os.set_blocking(self._dump_fd, False)
        with contextlib.suppress(OSError):
            fcntl.fcntl(self._dump_fd, fcntl.F_SETPIPE_SZ, DUMP_PIPE_BYTES)
        deadline = self.config.fatal_s + grace_s(self.config)
        args: list[object] = [os.getpid(), deadline, self.config.fatal_s, dump_r, FREEZE_SIGNAL]
        args += [str(self.log_path)] if self.log_path else []
        try:
            faulthandler.register(FREEZE_SIGNAL, file=self._dump_fd, all_threads=True, chain=False)
            # -I -S: the standard library only, no site-packages: a ~10 MB process, fast start
            self.proc = subprocess.Popen(
                [sys.executable, "-I", "-S", str(WATCHER), *map(str, args)],
                stdin=beat_r,
                stdout=subprocess.DEVNULL,
                pass_fds=(dump_r,),
            )
        except (OSError, ValueError, RuntimeError) as exc:
            log.error("sentinel.unavailable", error=str(exc))
            self._close()
            self._release_dump()
            return
        finally:
            os.close(beat_r)
            os.close(dump_r)
        self._started_at = time.monotonic()
        log.info("sentinel.started", pid=self.proc.pid, deadline_s=deadline)
        self._beat()

    def _beat(self) -> None:
        try:
            os.write(self._beat_fd, b".")
        except BlockingIOError:
            pass  # the watcher is behind: the beats already queued say the same
        except OSError as exc:
            self._lost(exc)
            return
        self._timer = self.loop.call_later(self.config.interval_ms / 1000, self._beat)

    def _lost(self, exc: OSError) -> None:
        """The watcher died (the OOM killer, a stray kill): start another, at most once
        every 10 s so a watcher that cannot live does not become a fork loop."""
        code = self.proc.poll() if self.proc else None  # reaps it
        self._close()
        self._release_dump()
        delay = max(0.0, self._started_at + RESPAWN_EVERY_S - time.monotonic())
        log.error("sentinel.lost", error=str(exc), exit_code=code, restart_in_s=round(delay, 1))
        self._timer = self.loop.call_later(delay, self.start)

    def dump_by_hand(self) -> None:
        """`DUMP_SIGNAL`: every thread's stack in the log, read under the interpreter's locks
        (a thread may end meanwhile), in faulthandler's format like `loop.frozen`'s."""
        log.warning("stacks.dumped", stack=thread_stacks())

    async def stop(self) -> None:
        self._close()
        await self._wait_closed()
        if self._by_hand:  # from now on the signal's default: the process ends
            self.loop.remove_signal_handler(DUMP_SIGNAL)
            self._by_hand = False

    def _close(self) -> None:
        """Stop beating and close the pipe: the watcher reads EOF and exits."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._beat_fd >= 0:
            os.close(self._beat_fd)
            self._beat_fd = -1

    async def _wait_closed(self) -> None:
        if self.proc is not None:
            await asyncio.to_thread(self._reap, self.proc)
            self.proc = None
        # only now: a dump signal the watcher sent just before EOF must find a handler
        self._release_dump()

    def _release_dump(self) -> None:
        if self._dump_fd >= 0:
            faulthandler.unregister(FREEZE_SIGNAL)
            os.close(self._dump_fd)
            self._dump_fd = -1

    @staticmethod
    def _reap(proc: subprocess.Popen[bytes]) -> None:
        try:
            proc.wait(2)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(2)


def thread_stacks(limit: int = 100) -> str:
    """Every thread's Python stack, most recent call first, as faulthandler writes them."""
    current = threading.get_ident()
    names = {t.ident: t.name for t in threading.enumerate()}
    blocks = []
    for ident, frame in sys._current_frames().items():
        head = "Current thread" if ident == current else "Thread"
        lines = [f"{head} 0x{ident:016x} [{names.get(ident, '?')}] (most recent call first):"]
        for fs in reversed(traceback.extract_stack(frame, limit=limit)):
            lines.append(f'  File "{fs.filename}", line {fs.lineno} in {fs.name}')
        blocks.append("\n".join(lines))
    return "\n\n".join(blocks)
