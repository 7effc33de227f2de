"""No token or key in any log line: the daemon at debug level on every platform, provoked into
the failures whose messages tend to carry secrets (rejected keys, error bodies echoing them,
a token Telegram stops accepting), then every line of its logs scanned for the test secrets.

Every other suite here (chaos, soak, security) scans its own logs the same way: daemons'
files at the end of each test, in-process gateways through the daemon's logging pipeline
(`tests/chaos/conftest.py`)."""

from __future__ import annotations

import signal
from pathlib import Path

import httpx
import pytest

from tests.chaos.kit import ChaosTelegram
from tests.e2e.daemon import GatewayProcess
from tests.fakes.discord import FakeDiscord
from tests.fakes.openai import FakeOpenAI, error, text
from tests.fakes.server import wait_until
from tests.fakes.slack import FakeSlack
from tests.security import keys

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.filterwarnings("ignore::telegram.warnings.PTBDeprecationWarning"),
]


def test_a_debug_level_daemon_on_every_platform_logs_no_secret(
    tmp_path: Path, llm: FakeOpenAI, tg: ChaosTelegram
) -> None:
    discord = FakeDiscord(token=keys.DISCORD_TOKEN, bot_id=1000, guild_id=2000, channel_id=3000)
    discord.start()
    slack = FakeSlack(bot_token=keys.SLACK_BOT_TOKEN, app_token=keys.SLACK_APP_TOKEN).start()
    config = {
        "model": {"base_url": llm.base_url, "api_key": keys.MODEL_KEY, "max_retries": 1},
        "control": {"token": keys.CONTROL_TOKEN},
        "logging": {"format": "json", "level": "debug"},
        "platforms": {
            "telegram": {
                "enabled": True,
                "token": keys.TELEGRAM_TOKEN,
                "base_url": tg.api_url,
                "base_file_url": tg.file_url,
                "allowed_users": [555],
            },
            "discord": {
                "enabled": True,
                "token": keys.DISCORD_TOKEN,
                "api_base": discord.api_base,
                "gateway_url": discord.gateway_url,
                "allowed_users": [42],
                "guild_ready_timeout_s": 0.02,
                "identify_delay_s": 0,
                "sync_commands": False,
            },
            "slack": {
                "enabled": True,
                "bot_token": keys.SLACK_BOT_TOKEN,
                "app_token": keys.SLACK_APP_TOKEN,
                "api_base": slack.api_base,
                "allowed_users": ["U123"],
            },
        },
    }
    echoed = f"Incorrect API key provided: {keys.MODEL_KEY}. Bearer {keys.MODEL_KEY}"
    llm.push(
        error(401, message=echoed),  # a provider that echoes the key it was given
        error(400, message=echoed),
        error(500, message=echoed),
        error(500, message=echoed),
    )
    home = tmp_path / "home"
    gw = GatewayProcess(home, config)
    headers = {"Authorization": f"Bearer {keys.CONTROL_TOKEN}"}
    try:
        gw.start()
        ready = f"{gw.url}/readyz"
        wait_until(lambda: httpx.get(ready, timeout=2).status_code == 200, timeout=30)
        tg.send_text(555, "first, the model rejects the key")
        wait_until(lambda: len(tg.messages_to(555)) == 1, timeout=20)
        tg.send_text(555, "then it says 400")
        wait_until(lambda: len(tg.messages_to(555)) == 2, timeout=20)
        tg.send_text(555, "then 500 twice")
        wait_until(lambda: len(tg.messages_to(555)) == 3, timeout=20)
        llm.push(text("fine again"))
        tg.fail_next("sendMessage", 401, description="Unauthorized", times=1)
        tg.send_text(555, "and Telegram stops taking the token once")
        discord.send_dm("hello from discord", user_id=42)
        slack.send_message("hello from slack", channel="D1")
        wait_until(lambda: discord.sent and slack.messages_in("D1"), timeout=20)
        body = {"user": "s", "messages": [{"role": "user", "content": "hi"}]}
        url = f"{gw.url}/v1/chat/completions"
        assert httpx.post(url, json=body, timeout=10).status_code == 401
        bad = {"Authorization": f"Bearer {keys.CONTROL_TOKEN}x"}
        assert httpx.post(url, json=body, headers=bad, timeout=10).status_code == 401
        assert httpx.post(url, json=body, headers=headers, timeout=30).status_code == 200
        gw.signal(signal.SIGTERM)
        code = gw.wait(20)
    finally:
        gw.kill()
        discord.stop()
        slack.stop()
    replies = [m["text"] for m in tg.messages_to(555)]
    assert code == 0
    assert not keys.leaks("\n".join(replies)), replies  # nor in what users are told
    logs = (home / "logs" / "gateway.log").read_text()
    assert "telegram.connected" in logs and "model.failed" in logs
    assert logs.count("\n") > 100  # debug level: plenty was written (aiosqlite is kept at INFO)
    keys.assert_no_leaks(keys.log_files(home))
