"""SIGTERM and SIGINT before the event loop takes them over: while `hermes gateway run`
imports and builds the gateway nothing is started yet, so a stop then ends the process at
once with exit 0 (the default action would kill it), or is kept for the loop to act on."""

from __future__ import annotations

import os
import signal
from types import FrameType

STOPS = (signal.SIGTERM, signal.SIGINT)
STOPPED = b"hermes: stopped before start\n"


class EarlyStop:
    """The handler of SIGTERM/SIGINT until `Lifecycle.serve` installs the loop's own."""

    def __init__(self) -> None:
        self.deferred = False
        self.seen: int | None = None

    def install(self) -> None:
        for sig in STOPS:
            signal.signal(sig, self._handle)

    def defer(self) -> None:
        """The loop runs and the gateway is being built: a signal is kept (`taken`) for
        `Lifecycle.serve`, which stops what was started by then."""
        self.deferred = True

    def stopped(self) -> None:
        """The gateway has stopped: a late signal is ignored, also while the interpreter
        shuts down (it restores the default action, which would turn exit 0 into -15)."""
        for sig in STOPS:
            signal.signal(sig, signal.SIG_IGN)

    def taken(self) -> int | None:
        """The signal received while deferred, if any (once)."""
        seen, self.seen = self.seen, None
        return seen

    def _handle(self, signum: int, _frame: FrameType | None) -> None:
        if self.deferred:
            self.seen = self.seen or signum
            return
        # nothing is started, nothing to flush: leave now. Not an exception: raised inside
        # an import, a native module turns it into its own error (pydantic-core panics)
        os.write(2, STOPPED)
        os._exit(0)


EARLY = EarlyStop()
