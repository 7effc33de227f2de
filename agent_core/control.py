"""`RunControl`: how the gateway reaches into a running agent loop from another thread:
interrupt it (cutting its model request in flight off), give it a deadline, steer it."""

from __future__ import annotations

import functools
import math
import threading
import time
from collections import deque
from collections.abc import Callable


class RunControl:
    """Thread-safe handles on one run: an interrupt flag, a deadline past which the run counts
    as interrupted (a cluster's session lease: checked before every model and tool call, on
    the run's own thread), hooks that cut work in flight off, and a queue of steering
    messages. A child run's control (`child`) is interrupted with its parent's (delegate_task).
    """

    def __init__(self, parent: RunControl | None = None) -> None:
        self._interrupted = threading.Event()
        self._steers: deque[str] = deque()
        self._lock = threading.Lock()
        self._parent = parent
        self._hooks: list[Callable[[], None]] = []
        self._deadline = math.inf  # time.monotonic(); one float, so set and read atomically

    def child(self) -> RunControl:
        return RunControl(parent=self)

    def interrupt(self) -> None:
        self._interrupted.set()
        with self._lock:
            hooks = list(self._hooks)
        for hook in hooks:
            hook()

    def expire_at(self, deadline: float) -> None:
        """From ``deadline`` (monotonic) on the run counts as interrupted."""
        self._deadline = deadline

    @property
    def expired(self) -> bool:
        return time.monotonic() >= self._deadline or (
            self._parent is not None and self._parent.expired
        )

    @property
    def interrupted(self) -> bool:
        if self._interrupted.is_set() or time.monotonic() >= self._deadline:
            return True
        return self._parent is not None and self._parent.interrupted

    def on_interrupt(self, hook: Callable[[], None]) -> Callable[[], None]:
        """Run ``hook`` when the run (or its parent) is interrupted, on the interrupting
        thread, or now if it already is; returns its remover. It may run twice."""
        with self._lock:
            self._hooks.append(hook)
        removers: list[Callable[[], None]] = [functools.partial(self._drop, hook)]
        if self._parent is not None:
            removers.append(self._parent.on_interrupt(hook))
        if self._interrupted.is_set():
            hook()

        def remove() -> None:
            for drop in removers:
                drop()

        return remove

    def _drop(self, hook: Callable[[], None]) -> None:
        with self._lock:
            if hook in self._hooks:
                self._hooks.remove(hook)

    def wait(self, seconds: float) -> bool:
        """Sleep up to ``seconds``; True if interrupted (or past the deadline) meanwhile."""
        end = time.monotonic() + seconds
        while not self.interrupted:
            left = min(end, self._deadline) - time.monotonic()
            if left <= 0:
                return self.interrupted
            # a parent's flag is not this event: look again now and then
            self._interrupted.wait(left if self._parent is None else min(left, 0.1))
        return True

    def steer(self, text: str) -> None:
        with self._lock:
            self._steers.append(text)

    def take_steers(self) -> list[str]:
        with self._lock:
            items = list(self._steers)
            self._steers.clear()
        return items
