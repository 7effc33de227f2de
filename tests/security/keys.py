"""The secrets the reliability suites configure, and the scan that proves none reaches a log.

Every suite in `tests/chaos`, `tests/soak` and `tests/security` gives the gateway these values
(not the fakes' short defaults), so a leak anywhere shows up as one of the ``SECRET-<kind>``
markers in a log line; `scan` looks for each whole secret and for its marker alone, which also
catches a secret cut in half or re-encoded around its marker.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import Path

TELEGRAM_BOT_ID = 7391046285
TELEGRAM_TOKEN = f"{TELEGRAM_BOT_ID}:AAF-SECRET-telegram-0123456789abcdefXYZ"
MODEL_KEY = "sk-chaos-SECRET-model-5f1e2d3c4b5a69788796a5b4"
CONTROL_TOKEN = "ctl-SECRET-control-0a9b8c7d6e5f4a3b"
DISCORD_TOKEN = "MTAwMDAw.SECRET-discord.chaoskit0123456789abcdef"
SLACK_BOT_TOKEN = "xoxb-1-SECRET-slackbot-0123456789"
SLACK_APP_TOKEN = "xapp-1-SECRET-slackapp-0123456789"
SLACK_SIGNING_SECRET = "SECRET-signing-5c4b3a2918f7e6d5"
WEBHOOK_SECRET = "SECRET-webhook-a1b2c3d4e5f6"

ALL = (
    TELEGRAM_TOKEN,
    MODEL_KEY,
    CONTROL_TOKEN,
    DISCORD_TOKEN,
    SLACK_BOT_TOKEN,
    SLACK_APP_TOKEN,
    SLACK_SIGNING_SECRET,
    WEBHOOK_SECRET,
)
_MARKER = re.compile(r"SECRET-[a-z]+")


def leaks(text: str) -> list[str]:
    """Every line of ``text`` that carries a test secret or a piece of one."""
    found = []
    for line in text.splitlines():
        if any(secret in line for secret in ALL) or _MARKER.search(line):
            found.append(line[:300])
    return found


def scan(paths: Iterable[Path]) -> list[str]:
    """`leaks` over files (rotated logs included); missing files are skipped."""
    found = []
    for path in paths:
        if path.is_file():
            found += [f"{path.name}: {line}" for line in leaks(path.read_text(errors="replace"))]
    return found


def log_files(home: Path) -> list[Path]:
    """A daemon's log files: ``<home>/logs/gateway.log*`` and the stderr capture next to home."""
    logs = sorted((home / "logs").glob("gateway.log*")) if (home / "logs").is_dir() else []
    return [*logs, home.parent / f"{home.name}-stderr.log"]


def assert_no_leaks(paths: Iterable[Path]) -> None:
    found = scan(paths)
    assert not found, "secrets in the logs:\n" + "\n".join(found[:20])
