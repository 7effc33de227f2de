"""`sandbox_procs.reap`: processes killed with their parent become the gateway's children (it is
their subreaper) only once that parent is gone, which on a loaded machine can be well after the
kill; they are waited for then, never left as zombies of the gateway."""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time

from tools import sandbox, sandbox_procs


def test_killed_processes_reparented_to_us_after_the_reap_began_are_reaped() -> None:
    sandbox._prctl(sandbox._PR_SET_CHILD_SUBREAPER, 1)  # as the fallback sandbox does
    # a parent that never waits for its children (it became `sleep`)
    parent = subprocess.Popen(["sh", "-c", "sleep 60 & sleep 60 & exec sleep 60"])
    try:
        deadline = time.monotonic() + 10
        while len(kids := sandbox_procs.descendants(parent.pid)) < 2:
            assert time.monotonic() < deadline, "the children did not start"
            time.sleep(0.02)
        for pid in kids:
            os.kill(pid, signal.SIGKILL)  # zombies of a parent that lives on, for now
        # the parent goes a moment after the reap began: only then are they ours
        threading.Timer(0.3, parent.kill).start()
        sandbox_procs.reap(set(kids))
        parent.wait(10)
        assert [pid for pid in kids if sandbox_procs._stat(pid) is not None] == []
    finally:
        parent.kill()
        parent.wait(10)
