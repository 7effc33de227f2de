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
