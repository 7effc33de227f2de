"""What only a platform knows is declared by its package, not written in the core: the shape of
its tokens (every log redacts it) and the environment variables its secrets come from (the
service's secrets file lists them). Proved with the toy platform, installed beside the gateway
in a child process, against the same process without it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

TOY_SITE = Path(__file__).resolve().parents[1] / "toy_platform"
PROBE = (
    "from hermes_gateway.logs import Redactor\n"
    "from hermes_gateway.cli.systemd import env_template\n"
    "print(Redactor()('the key is toy-live-abcdefgh, the bot 123456:' + 'A' * 35))\n"
    "print(env_template())\n"
)


def run(with_toy: bool) -> str:
    env = dict(os.environ)
    if with_toy:
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(TOY_SITE), env.get("PYTHONPATH")) if p)
    out = subprocess.run(
        [sys.executable, "-c", PROBE], env=env, capture_output=True, text=True, check=True
    )
    return out.stdout


def test_a_platform_package_declares_its_token_shape_and_its_secrets_variables() -> None:
    installed = run(with_toy=True)
    assert "the key is ***, the bot ***" in installed  # the toy's shape, Telegram's shape
    assert "# TOY_TOKEN=" in installed and "# TELEGRAM_BOT_TOKEN=" in installed
    alone = run(with_toy=False)
    assert "toy-live-abcdefgh" in alone and "the bot ***" in alone
    assert "TOY_TOKEN" not in alone
