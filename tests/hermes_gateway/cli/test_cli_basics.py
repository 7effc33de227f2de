"""The `hermes` command's manners: help for a bare `hermes`, no traceback when its reader
stops early (`hermes gateway logs | head`)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path


def test_a_bare_hermes_prints_help() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "hermes_gateway"], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0
    assert "gateway" in proc.stdout and "usage: hermes" in proc.stdout
    assert proc.stderr == ""


def test_a_reader_that_stops_early_gets_no_traceback(tmp_path: Path) -> None:
    (tmp_path / "logs").mkdir()
    line = '{"event": "x", "level": "info", "timestamp": "2026-12-01T00:00:00Z"}\n'
    (tmp_path / "logs" / "gateway.log").write_text(line * 20_000)  # well past a pipe's buffer
    for extra in ([], ["--json"]):
        proc = subprocess.Popen(
            [sys.executable, "-m", "hermes_gateway", "gateway", "logs", *extra],
            env={**os.environ, "HERMES_HOME": str(tmp_path)},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        assert proc.stdout is not None and proc.stderr is not None
        assert proc.stdout.readline()
        proc.stdout.close()  # what `head -1` does after its line
        err = proc.stderr.read().decode()
        assert proc.wait(timeout=60) == 0, err
        assert "Traceback" not in err and "BrokenPipe" not in err


def test_logs_with_nothing_to_show_say_so(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "hermes_gateway", "gateway", "logs"],
        env={**os.environ, "HERMES_HOME": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 1
    assert f"no log file at {tmp_path / 'logs' / 'gateway.log'}" in proc.stderr
