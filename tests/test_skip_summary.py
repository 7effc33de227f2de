"""The test run ends with one line counting the skipped tests by reason (tests/conftest.py), so
a run without PostgreSQL or Redis says what it left out."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_a_run_ends_with_the_skips_counted_by_reason() -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HERMES_TEST_")}
    target = "tests/hermes_gateway/store/test_store_fence.py::test_on_postgres"
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-n", "0", "-p", "no:cacheprovider", target],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    [line] = [x for x in proc.stdout.splitlines() if x.startswith("skipped ")]
    assert re.fullmatch(r"skipped (\d+): \1 set HERMES_TEST_POSTGRES \(CI does\)", line), line
