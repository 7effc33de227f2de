"""Exactly-once delivery across a crash, per platform: `hermes gateway run` is SIGKILLed right
after the fake platform took a reply part and before the gateway could record it, then
restarted. The replay must not post that part again: Discord returns the first message for its
nonce, Slack finds it in the history by its metadata, Telegram by an edit probe."""

from __future__ import annotations

import signal
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.chaos.crash import gateway_config
from tests.chaos.killing import Armed, Hook, KillingDiscord, KillingSlack, KillingTelegram, killer
from tests.e2e.daemon import GatewayProcess
from tests.fakes.openai import FakeOpenAI, text
from tests.fakes.server import wait_until
from tests.integration.test_discord_kit import ALICE
from tests.security import keys

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.filterwarnings("ignore::telegram.warnings.PTBDeprecationWarning"),
]
CHAT = 1001
PARAGRAPHS = [f"part{n} " + " ".join(f"w{n}x{j}" for j in range(400)) for n in (1, 2, 3)]


def start(gw: GatewayProcess) -> None:
    gw.start(wait=False)
    gw.wait_healthy(90)  # generous: a loaded CI machine starts a process slowly
    wait_until(lambda: httpx.get(f"{gw.url}/readyz", timeout=2).status_code == 200, timeout=60)


def stop(gw: GatewayProcess) -> None:
    gw.signal(signal.SIGTERM)
    assert gw.wait(20) == 0


def model(llm: FakeOpenAI) -> dict[str, Any]:
    return {"base_url": llm.base_url, "api_key": keys.MODEL_KEY, "max_retries": 0}


def crash_then_restart(gw: GatewayProcess, trigger: Armed, prefix: str, ask: Hook) -> None:
    trigger.arm(prefix, killer(gw))
    start(gw)
    ask()
    wait_until(lambda: trigger.fired and gw.proc is not None and gw.proc.poll() is not None, 30)
    start(gw)


@pytest.fixture
def tg() -> Iterator[KillingTelegram]:
    fake = KillingTelegram().start()
    try:
        yield fake
    finally:
        fake.stop()


@pytest.mark.parametrize(
    "prefix",  # the first part, the last (slow: part1 covers the same check)
    ["part1", pytest.param("part3", marks=pytest.mark.slow)],
)
def test_telegram_a_part_taken_before_the_kill_is_not_sent_again(
    tmp_path: Path, llm: FakeOpenAI, tg: KillingTelegram, prefix: str
) -> None:
    gw = GatewayProcess(tmp_path / "home", gateway_config(tg, llm, [CHAT]))
    llm.push(text("\n\n".join(PARAGRAPHS)))  # three Telegram messages
    try:
        crash_then_restart(gw, tg.trigger, prefix, lambda: tg.send_text(CHAT, "three parts"))
        wait_until(lambda: len(tg.messages_to(CHAT)) >= 3, timeout=20)
        stop(gw)
    finally:
        gw.kill()
    shown = [m["text"].split()[0] for m in tg.messages_to(CHAT)]
    assert shown == ["part1", "part2", "part3"]
    assert len(llm.requests) == 1
    probes = [p for name, p in tg.calls if name == "editMessageText"]
    assert probes, "the part in doubt was not checked"


@pytest.fixture
def dc() -> Iterator[KillingDiscord]:
    fake = KillingDiscord().start()
    try:
        yield fake
    finally:
        fake.stop()
    assert fake.errors == []


def test_discord_a_part_taken_before_the_kill_is_not_posted_again(
    tmp_path: Path, llm: FakeOpenAI, dc: KillingDiscord
) -> None:
    section = {
        "enabled": True,
        "token": "dc-token",
        "api_base": dc.api_base,
        "gateway_url": dc.gateway_url,
        "allowed_users": [ALICE],
        "guild_ready_timeout_s": 0.05,
    }
    config = {"model": model(llm), "platforms": {"discord": section}}
    gw = GatewayProcess(tmp_path / "home", config)
    paragraphs = [f"part{n} " + " ".join(f"w{n}x{j}" for j in range(280)) for n in (1, 2, 3)]
    llm.push(text("\n\n".join(paragraphs)))  # three Discord messages of up to 2000 characters
    try:
        crash_then_restart(gw, dc.trigger, "part2", lambda: dc.send_dm("three", user_id=ALICE))
        wait_until(lambda: len(dc.sent) >= 3, timeout=20)
        stop(gw)
    finally:
        gw.kill()
    assert [m["content"].split()[0] for m in dc.sent] == ["part1", "part2", "part3"]
    assert len(dc.nonce_hits) == 1  # the replay's post of part 2 was answered with the first


@pytest.fixture
def slack() -> Iterator[KillingSlack]:
    fake = KillingSlack().start()
    try:
        yield fake
    finally:
        fake.stop()


def test_slack_a_part_taken_before_the_kill_is_found_and_not_posted_again(
    tmp_path: Path, llm: FakeOpenAI, slack: KillingSlack
) -> None:
    section = {
        "enabled": True,
        "api_base": slack.api_base,
        "allowed_users": ["U123"],
        "ping_interval_s": 0.5,
        "message_limit": 2000,
    }
    config = {"model": model(llm), "platforms": {"slack": section}}
    env = {"SLACK_BOT_TOKEN": slack.bot_token, "SLACK_APP_TOKEN": slack.app_token}
    gw = GatewayProcess(tmp_path / "home", config, env=env)
    paragraphs = [f"part{n} " + " ".join(f"w{n}x{j}" for j in range(280)) for n in (1, 2, 3)]
    llm.push(text("\n\n".join(paragraphs)))
    try:
        ask = lambda: slack.send_message("three parts", channel="D1")  # noqa: E731
        crash_then_restart(gw, slack.trigger, "part2", ask)
        wait_until(lambda: len(slack.messages_in("D1")) >= 3, timeout=20)
        stop(gw)
    finally:
        gw.kill()
    assert [m["text"].split()[0] for m in slack.messages_in("D1")] == ["part1", "part2", "part3"]
    lookups = slack.calls_to("conversations.history") + slack.calls_to("conversations.replies")
    assert lookups and all(c.get("include_all_metadata") in ("1", "true", True) for c in lookups)


# -- a scheduled job's answer: its delivery taken up again at the restart ---------------------

SCHEDULER = {"enabled": True, "timezone": "UTC", "tick_s": 0.2, "min_interval_s": 1, "lease_s": 2}
AUTH = {"Authorization": f"Bearer {keys.CONTROL_TOKEN}"}


def add_job(gw: GatewayProcess, deliver: str) -> str:
    job = {"schedule": "in 1s", "prompt": "Report the backup status.", "deliver": deliver}
    made = httpx.post(f"{gw.url}/v1/cron/jobs", json=job, headers=AUTH, timeout=10)
    assert made.status_code == 200, made.text
    return str(made.json()["job"]["id"])


def delivered(gw: GatewayProcess, job_id: str) -> bool:
    url = f"{gw.url}/v1/cron/jobs/{job_id}/runs"
    runs = httpx.get(url, headers=AUTH, timeout=10).json()["runs"]
    return [(r["status"], r["delivery"]) for r in runs] == [("succeeded", "delivered")]


def crash_a_job_then_restart(
    gw: GatewayProcess, trigger: Armed, deliver: str, count: Callable[[], int]
) -> None:
    """The job's answer (three parts) is cut short after the platform took part 2; the restart
    takes its delivery up again once the run's lease ran out."""
    trigger.arm("part2", killer(gw))
    start(gw)
    job_id = add_job(gw, deliver)
    wait_until(lambda: trigger.fired and gw.proc is not None and gw.proc.poll() is not None, 30)
    start(gw)
    wait_until(lambda: count() >= 3 and delivered(gw, job_id), timeout=30)
    stop(gw)


def test_telegram_a_job_part_taken_before_the_kill_is_not_sent_again(
    tmp_path: Path, llm: FakeOpenAI, tg: KillingTelegram
) -> None:
    config = {**gateway_config(tg, llm, [CHAT]), "scheduler": SCHEDULER}
    gw = GatewayProcess(tmp_path / "home", config)
    llm.push(text("\n\n".join(PARAGRAPHS)))
    try:
        crash_a_job_then_restart(gw, tg.trigger, f"telegram:{CHAT}", lambda: len(tg.sent))
    finally:
        gw.kill()
    assert [m["text"].split()[0] for m in tg.messages_to(CHAT)] == ["part1", "part2", "part3"]
    assert len(llm.requests) == 1  # the answer was delivered again, not computed again
    assert [p for name, p in tg.calls if name == "editMessageText"], "part 2 was not checked"


def test_slack_a_job_part_taken_before_the_kill_is_found_and_not_posted_again(
    tmp_path: Path, llm: FakeOpenAI, slack: KillingSlack
) -> None:
    section = {"enabled": True, "api_base": slack.api_base, "message_limit": 2000}
    config = {
        "model": model(llm),
        "platforms": {"slack": {**section, "allowed_users": ["U123"], "ping_interval_s": 0.5}},
        "control": {"token": keys.CONTROL_TOKEN},
        "scheduler": SCHEDULER,
    }
    env = {"SLACK_BOT_TOKEN": slack.bot_token, "SLACK_APP_TOKEN": slack.app_token}
    gw = GatewayProcess(tmp_path / "home", config, env=env)
    paragraphs = [f"part{n} " + " ".join(f"w{n}x{j}" for j in range(280)) for n in (1, 2, 3)]
    llm.push(text("\n\n".join(paragraphs)))
    try:
        crash_a_job_then_restart(gw, slack.trigger, "slack:D1", lambda: len(slack.posted))
    finally:
        gw.kill()
    assert [m["text"].split()[0] for m in slack.messages_in("D1")] == ["part1", "part2", "part3"]
    assert len(llm.requests) == 1
    lookups = slack.calls_to("conversations.history") + slack.calls_to("conversations.replies")
    assert lookups, "part 2 was not looked up"
