"""Suspects on probation: messages that were in flight at a crash nothing explained run one at a
time across the gateway, and only once it has stayed up a while without them, so a crash during
such a run points at its one suspect (the rule is in docs/quarantine.md). Other messages run as
usual meanwhile."""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable
from typing import Generic, TypeVar

R = TypeVar("R")


class Probation(Generic[R]):
    """Which inbox entries are suspects, the one suspect run in flight, and the suspect runs
    waiting for their turn (each holds its session's guard meanwhile, so its session keeps its
    order). Used on the event-loop thread only.

    ``calm_s``: from the first suspect run queued, the gateway works that long without any, so
    that a process killed from outside at random moments dies in that window, where no crash is
    counted against anyone, far more often than in the one suspect's run after it."""

    def __init__(self, calm_s: float = 0.0, clock: Callable[[], float] = time.monotonic) -> None:
        self.calm_s = calm_s
        self._clock = clock
        self._suspects: dict[int, int] = {}  # inbox id -> crashes counted against it so far
        self._running: R | None = None
        self._waiting: dict[R, tuple[int, int]] = {}  # run -> (counted, arrival)
        self._arrivals = itertools.count()
        self._calm_until: float | None = None  # time.monotonic()

    def suspect(self, suspects: dict[int, int]) -> None:
        """Add entries the start's verdict suspects (inbox id -> crashes counted)."""
        self._suspects.update(suspects)

    def on_probation(self, run: R) -> bool:
        """Whether ``run`` is the one suspect run in flight."""
        return run is self._running

    def holds(self, run: R, inbox_ids: list[int]) -> bool:
        """True if ``run`` (answering ``inbox_ids``) carries a suspect: it waits for `next` to
        start it. False: it starts now like any run."""
        counted = [self._suspects[i] for i in inbox_ids if i in self._suspects]
        if not counted:
            return False
        if self._calm_until is None:
            self._calm_until = self._clock() + self.calm_s
        self._waiting[run] = (max(counted), next(self._arrivals))
        return True

    def wait_s(self) -> float:
        """How long until a waiting suspect run may start (0: now)."""
        return max(0.0, (self._calm_until or 0.0) - self._clock())

    def due_in(self) -> float | None:
        """When to call `next` again: in this many seconds (0: now), or None when nothing
        would start (a suspect run is in flight, whose end calls it, or none waits). Asked
        afresh after a `next` that started nothing, it is never None while a run waits for the
        calm alone: a timer that fired a moment early is followed by another, never by none."""
        if self._running is not None or not self._waiting:
            return None
        return self.wait_s()

    def next(self, stopped: Callable[[R], bool]) -> R | None:
        """The waiting suspect run to start now, which is then on probation; None while one is
        in flight, during the calm, or if none waits (runs ``stopped`` meanwhile are dropped).
        The ones with fewer crashes counted go first: they are the likelier innocent, answered
        before a likelier poison takes the process down."""
        for waiting in [r for r in self._waiting if stopped(r)]:
            del self._waiting[waiting]
        if self.due_in() != 0.0:
            return None
        nxt = min(self._waiting, key=self._waiting.__getitem__)
        del self._waiting[nxt]
        self._running = nxt
        return nxt

    def release(self, run: R, inbox_ids: list[int]) -> None:
        """The suspect run (answering ``inbox_ids``) ended: they were answered, or are left
        for the next start's verdict; either way they are no longer suspects here."""
        if run is self._running:
            for inbox_id in inbox_ids:
                self._suspects.pop(inbox_id, None)
            self._running = None

    def forget(self, run: R) -> None:
        """A waiting run that will never start (a shutdown)."""
        self._waiting.pop(run, None)
