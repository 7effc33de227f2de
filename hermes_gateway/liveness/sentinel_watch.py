"""The sentinel's watcher process: stdlib only, its own interpreter and GIL, so a gateway thread
that holds the GIL cannot starve it. It kills the gateway when the event loop stops beating.

Run by `hermes_gateway.liveness.sentinel` as `python -I -S sentinel_watch.py PID DEADLINE_S FATAL_S
DUMP_FD FREEZE_SIGNAL [LOG_PATH]`; the loop's beats
arrive on stdin (EOF: the gateway stopped us, or is gone) and faulthandler's dump of every
thread's stack arrives on the `dump_fd` pipe.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import sys
import time

PR_SET_PDEATHSIG = 1
DUMP_IDLE_S = 0.25  # faulthandler writes the whole dump at once: this much quiet means done
DUMP_MAX_S = 2.0
DUMP_MAX_BYTES = 256 * 1024


class Watcher:
    def __init__(self, args: list[str]) -> None:
        self.pid = int(args[0])
        self.deadline = float(args[1])
        self.fatal_s = float(args[2])
        self.dump_fd = int(args[3])
        self.dump_signal = int(args[4])
        self.log_path = args[5] if len(args) > 5 else None

    def run(self) -> int:
        last = time.monotonic()
        while True:
            wait = max(0.0, last + self.deadline - time.monotonic())
            ready, _, _ = select.select([0, self.dump_fd], [], [], wait)
            if 0 in ready:
                if not os.read(0, 4096):
                    return 0
                # a beat that waited in the pipe while we were not scheduled still counts:
                # only silence seen with the pipe empty is the loop's
                last = time.monotonic()
            if self.dump_fd in ready:  # someone sent the freeze signal by hand
                stack = self.read_dump()
                if not stack:  # EOF: the gateway is gone, a fork of it may hold our stdin
                    return 0
                self.log("stacks.dumped", "warning", stack=stack)
            silent = time.monotonic() - last
            if silent >= self.deadline and not ready:
                self.fire(silent)
                return 1

    def fire(self, silent: float) -> None:
        if os.getppid() != self.pid:  # the gateway is already gone: never kill a reused pid
            return
        try:
            os.kill(self.pid, self.dump_signal)
        except ProcessLookupError:
            return
        stack = self.read_dump()
        self.log(
            "loop.frozen",
            "critical",
            seconds=round(silent, 2),
            fatal_s=self.fatal_s,
            stack=stack,
            action="SIGKILL",
            detail="no heartbeat from the event loop and the in-process watchdog did not exit: "
            "a thread holds the GIL (the stack field names it); killing the gateway",
        )
        if os.getppid() == self.pid:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signal.SIGKILL)

    def read_dump(self) -> str:
        chunks: list[bytes] = []
        end = time.monotonic() + DUMP_MAX_S
        while (left := end - time.monotonic()) > 0:
            ready, _, _ = select.select([self.dump_fd], [], [], min(DUMP_IDLE_S, left))
            if not ready:
                if chunks:
                    break
                continue
            chunk = os.read(self.dump_fd, 1 << 16)
            if not chunk:
                break
            chunks.append(chunk)
        dump = b"".join(chunks)
        if len(dump) > DUMP_MAX_BYTES:  # one log line stays readable; the top frames come first
            dump = dump[:DUMP_MAX_BYTES] + b"\n[truncated]"
        return dump.decode("utf-8", "replace")

    def log(self, event: str, level: str, **fields: object) -> None:
        """One JSON line shaped like the gateway's own, to its log file and to stderr."""
        import datetime  # imported only when needed: the idle watcher stays small
        import json

        stamp = datetime.datetime.now(datetime.UTC).isoformat().replace("+00:00", "Z")
        line = json.dumps(
            {
                "event": event,
                "level": level,
                "logger": "hermes.sentinel",
                "timestamp": stamp,
                "gateway_pid": self.pid,
                **fields,
            },
            ensure_ascii=False,
        )
        if self.log_path:
            try:
                with open(self.log_path, "a", encoding="utf-8") as f:
                    f.write(line + "\n")
            except OSError:
                pass
        try:
            sys.stderr.write(line + "\n")
            sys.stderr.flush()
        except OSError:
            pass


def die_with(pid: int) -> None:
    """Have the kernel kill us when the gateway dies, even if a fork of it keeps our pipe."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):
        pass  # not Linux: stdin's EOF still ends us
    if os.getppid() != pid:  # it died before the prctl took hold
        sys.exit(0)


def main(argv: list[str]) -> int:
    # Ctrl-C in a terminal reaches the whole process group: stopping is the gateway's call
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    die_with(int(argv[1]))
    return Watcher(argv[1:]).run()


if __name__ == "__main__":
    sys.exit(main(sys.argv))
