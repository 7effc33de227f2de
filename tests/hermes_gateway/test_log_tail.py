"""`hermes gateway logs`: filters, rendering, rotated files, following across rotation."""

from __future__ import annotations

import io
import json
import subprocess
import sys
import threading
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

from hermes_gateway.logs import tail


def line(event: str, level: str = "info", ago_s: float = 0, **extra: str) -> str:
    stamp = (datetime.now(UTC) - timedelta(seconds=ago_s)).isoformat().replace("+00:00", "Z")
    return json.dumps({"event": event, "level": level, "timestamp": stamp, **extra}) + "\n"


def test_filters_by_level_session_platform_and_time() -> None:
    lines = [
        line("old", ago_s=7200, session_key="telegram:dm:1", platform="telegram"),
        line("debugging", "debug", session_key="telegram:dm:1", platform="telegram"),
        line("warned", "warning", session_key="telegram:dm:1", platform="telegram"),
        line("other", "error", session_key="slack:dm:D2", platform="slack"),
        "not json at all\n",
    ]
    out = io.StringIO()
    flt = tail.LogFilter(
        since=tail.parse_since("1h"), level=tail.LEVELS["warning"], platform="telegram"
    )
    assert tail.show(lines, flt, out, as_json=True, color=False) == 1
    assert json.loads(out.getvalue())["event"] == "warned"
    out = io.StringIO()
    tail.show(lines, tail.LogFilter(session="slack:"), out, as_json=False, color=False)
    assert "other" in out.getvalue() and "warned" not in out.getvalue()


def test_render_is_readable_and_keeps_stacks() -> None:
    entry = tail.parse_line(line("loop.lag", "warning", stalled_ms="250", stack="File x, line 1"))
    text = tail.render(entry, color=False)
    first, rest = text.split("\n", 1)
    assert "warning" in first and "loop.lag" in first and "stalled_ms=250" in first
    assert rest == "File x, line 1"
    assert "\033[" in tail.render(entry, color=True)


def test_parse_since() -> None:
    now = datetime(2026, 1, 1, 12, tzinfo=UTC)
    assert tail.parse_since("10m", now) == now - timedelta(minutes=10)
    assert tail.parse_since("2026-01-01T11:00:00Z") == now - timedelta(hours=1)


def test_reads_rotated_files_oldest_first(tmp_path: Path) -> None:
    log = tmp_path / "gateway.log"
    (tmp_path / "gateway.log.2").write_text(line("first"))
    (tmp_path / "gateway.log.1").write_text(line("second"))
    log.write_text(line("third"))
    events = [json.loads(x)["event"] for x in tail.read_lines(log, include_rotated=True)]
    assert events == ["first", "second", "third"]


def test_follow_survives_rotation(tmp_path: Path) -> None:
    log = tmp_path / "gateway.log"
    log.write_text(line("before"))
    seen: list[str] = []
    done = threading.Event()

    def reader() -> None:
        for raw in tail.follow(log, poll=0.02, stop=done.is_set):
            seen.append(json.loads(raw)["event"])

    thread = threading.Thread(target=reader, daemon=True)
    thread.start()
    time.sleep(0.1)
    with log.open("a") as fh:
        fh.write(line("one"))
    time.sleep(0.1)
    with log.open("a") as fh:
        fh.write(line("two"))  # written just before the rotation: must not be lost
    log.rename(tmp_path / "gateway.log.1")
    log.write_text(line("three"))
    deadline = time.monotonic() + 5
    while seen[-1:] != ["three"] and time.monotonic() < deadline:
        time.sleep(0.02)
    done.set()
    thread.join(2)
    assert seen == ["one", "two", "three"]


def test_cli_logs_filters_the_file(tmp_path: Path) -> None:
    home = tmp_path / "home"
    (home / "logs").mkdir(parents=True)
    (home / "logs/gateway.log").write_text(
        line("quiet", "info") + line("loud", "error", session_key="api:dm:x")
    )
    proc = subprocess.run(
        [sys.executable, "-m", "hermes_gateway", "gateway", "logs", "--level", "error"],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
        env={"HOME": str(tmp_path), "HERMES_HOME": str(home), "PATH": "/usr/bin:/bin"},
    )
    assert proc.returncode == 0, proc.stderr
    assert "loud" in proc.stdout and "quiet" not in proc.stdout
    assert "session_key=api:dm:x" in proc.stdout
