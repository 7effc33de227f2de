"""`Probation`: suspects run one at a time, after the calm, the ones with fewer crashes counted
first; a run with no suspect is never held."""

from __future__ import annotations

import time

from hermes_gateway.core.probation import Probation


def test_one_suspect_run_at_a_time_fewest_counted_first_after_the_calm() -> None:
    probation: Probation[str] = Probation(calm_s=0.2)
    probation.suspect({1: 1, 2: 0, 3: 0})
    assert not probation.holds("ordinary", [7])
    assert probation.holds("likelier poison", [1])
    assert probation.holds("stopped", [2])
    assert probation.holds("innocent", [3, 8])
    assert probation.next(lambda r: False) is None  # the calm
    assert 0 < probation.wait_s() <= 0.2
    time.sleep(probation.wait_s())
    assert probation.next(lambda r: r == "stopped") == "innocent"
    assert probation.on_probation("innocent")
    assert probation.next(lambda r: False) is None  # one at a time
    probation.release("innocent", [3, 8])
    assert probation.next(lambda r: False) == "likelier poison"
    probation.release("likelier poison", [1])
    assert probation.next(lambda r: False) is None  # nothing waits
    assert not probation.holds("again", [1, 3])  # no longer suspects here


def test_a_timer_that_fires_a_moment_early_is_followed_by_another() -> None:
    """The runner's timer asks `next`, and when it started nothing, asks `due_in` when to try
    again. An event loop runs a timer up to a millisecond early: `next` then still sees the
    calm, and by the time `due_in` reads the clock it is over. `due_in` must say "now" then:
    a runner that took "no wait left" for "nothing to wait for" set no timer again, and every
    session with a suspect waited for good (a restart after a kill answered nothing)."""
    calm_until = 5.0
    times = iter([0.0, calm_until - 0.0004, calm_until + 0.0001, calm_until + 0.0002])
    probation: Probation[str] = Probation(calm_s=calm_until, clock=lambda: next(times))
    probation.suspect({1: 0})
    assert probation.holds("suspect", [1])  # the calm starts (clock 0)
    assert probation.next(lambda r: False) is None  # the early timer: still calm
    assert probation.due_in() == 0.0  # read a moment later: due now, not "nothing waits"
    assert probation.next(lambda r: False) == "suspect"


def test_due_in_is_none_only_while_a_suspect_runs_or_none_waits() -> None:
    probation: Probation[str] = Probation(calm_s=0.0)
    assert probation.due_in() is None  # none waits
    probation.suspect({1: 0, 2: 0})
    assert probation.holds("a", [1]) and probation.holds("b", [2])
    assert probation.due_in() == 0.0
    assert probation.next(lambda r: False) == "a"
    assert probation.due_in() is None  # "a" runs: its end asks again
    probation.release("a", [1])
    assert probation.due_in() == 0.0
    assert probation.next(lambda r: r == "b") is None  # "b" was stopped while it waited
    assert probation.due_in() is None
