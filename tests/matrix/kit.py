"""What the Matrix end-to-end tests share: a gateway on the real Synapse (or on a relay in
front of it), the bot's messages as a person's client sees them."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx

from tests.e2e.daemon import GatewayProcess
from tests.fakes.openai import FakeOpenAI
from tests.fakes.server import wait_until
from tests.matrix_server import MatrixUser


def matrix_gateway(
    home: Path, llm: FakeOpenAI, homeserver: str, bot: MatrixUser, **section: Any
) -> GatewayProcess:
    matrix = {"enabled": True, "homeserver": homeserver, "sync_timeout_s": 5, **section}
    config: dict[str, Any] = {
        "model": {"base_url": llm.base_url, "api_key": llm.api_key or "sk-fake", "max_retries": 0},
        "platforms": {"matrix": matrix},
    }
    if "tools" in section:
        config["tools"] = matrix.pop("tools")
    # the token comes from the environment, as in a systemd unit's EnvironmentFile
    return GatewayProcess(home, config, env={"MATRIX_ACCESS_TOKEN": bot.token})


def ready(gateway: GatewayProcess, wait: bool = True) -> None:
    gateway.start(wait=wait)
    gateway.wait_healthy(90)
    wait_until(lambda: httpx.get(f"{gateway.url}/readyz", timeout=2).status_code == 200, 60)


def hermes(gateway: GatewayProcess, *args: str) -> subprocess.CompletedProcess[str]:
    """``hermes ARGS`` as the operator runs it, ``CONFIG`` standing for the gateway's file."""
    args = tuple(str(gateway.config_path) if a == "CONFIG" else a for a in args)
    command = [sys.executable, "-m", "hermes_gateway", *args]
    return subprocess.run(command, env=gateway.env, capture_output=True, text=True, timeout=60)


def bot_messages(user: MatrixUser, room: str, bot: MatrixUser) -> list[dict[str, Any]]:
    """The bot's messages in ``room`` (edits folded away), oldest first."""
    return user.from_user(room, bot.user_id)


def bodies(user: MatrixUser, room: str, bot: MatrixUser) -> list[str]:
    return [str(m["content"].get("body", "")) for m in bot_messages(user, room, bot)]


def joined(user: MatrixUser, room: str, bot: MatrixUser) -> bool:
    return bot.user_id in user.joined(room)
