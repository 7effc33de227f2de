"""Exactly-once reply parts across a cluster failover: two `hermes gateway run` instances on one
PostgreSQL database and one Redis. Instance A runs a session whose reply has three parts and is
SIGKILLed right after the fake platform took part 2 (slow variants: part 1, part 3), before A
could record it; instance B's sweep takes the session over once A's lease runs out and
finishes the reply. Every part must be in the chat exactly once: B checks the part in doubt
(Discord's nonce, Slack's metadata in the history, Telegram's edit probe) before it sends it
again, and sends only what comes after it. And an instance paused in the middle of a reply
past its lease sends no further part once the other took the session over."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.chaos.cluster import redis_and_postgres
from tests.chaos.crash import gateway_config
from tests.chaos.killing import Armed, KillingDiscord, KillingSlack, KillingTelegram, killer
from tests.e2e.daemon import GatewayProcess
from tests.fakes.openai import FakeOpenAI, text
from tests.fakes.server import wait_until
from tests.fakes.slack import make_message_event
from tests.integration.test_discord_kit import ALICE
from tests.security import keys

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.filterwarnings("ignore::telegram.warnings.PTBDeprecationWarning"),
]
LEASE_S = 3
CHAT = 1001
Urls = tuple[str, str]  # the store's URL, Redis's URL
# the part after which A dies: the middle one by default; the first and the last are slow
PARTS = pytest.mark.parametrize(
    "cut",
    [
        "part2",
        pytest.param("part1", marks=pytest.mark.slow),
        pytest.param("part3", marks=pytest.mark.slow),
    ],
)
# The takeover path is the same for every platform and Slack's case runs it in the default
# suite; each platform's own check of a part in doubt is in test_exactly_once.py.
ALL_SLOW = pytest.mark.parametrize(
    "cut",
    [pytest.param(cut, marks=pytest.mark.slow) for cut in ("part2", "part1", "part3")],
)


def paragraphs(words: int) -> list[str]:
    """Three paragraphs, each one message on the platform: part1, part2, part3."""
    return [f"part{n} " + " ".join(f"w{n}x{j}" for j in range(words)) for n in (1, 2, 3)]


@pytest.fixture
def shared(tmp_path: Path) -> Iterator[Urls]:
    """One PostgreSQL database and one Redis of the test's own (skips without either)."""
    with redis_and_postgres(tmp_path) as urls:
        yield urls


def instance(name: str, tmp_path: Path, urls: Urls, config: dict[str, Any]) -> GatewayProcess:
    store_url, redis_url = urls
    cluster = {"redis_url": redis_url, "instance_id": name, "lease_s": LEASE_S}
    # these kills are not the message's fault: it must not count towards quarantine
    store = {"url": store_url, "quarantine_after": 1000, "probation_calm_s": 0}
    return GatewayProcess(tmp_path / name, {**config, "store": store, "cluster": cluster})


def logged(gw: GatewayProcess, name: str) -> list[dict[str, Any]]:
    try:
        return [e for e in gw.log_events() if e.get("event") == name]
    except FileNotFoundError:
        return []


def status(gw: GatewayProcess) -> dict[str, Any]:
    try:
        return dict(
            httpx.get(f"{gw.url}/status", headers=gw.operator, timeout=5).json().get("cluster")
            or {}
        )
    except httpx.HTTPError:
        return {}


def take_over(
    a: GatewayProcess,
    b: GatewayProcess,
    trigger: Armed,
    cut: str,
    ask: Callable[[], None],
    *,
    leads: Callable[[GatewayProcess], bool],
    stands_by: Callable[[GatewayProcess], bool],
) -> float:
    """A starts and takes the platform's intake; B starts beside it; the message goes to A,
    which is killed once the platform took the part ``cut``; B takes the session over."""
    a.start(wait=False).wait_healthy(90)  # generous: a loaded machine starts a process slowly
    wait_until(lambda: leads(a), timeout=60)
    b.start(wait=False).wait_healthy(90)
    wait_until(lambda: bool(logged(b, "gateway.ready")) and stands_by(b), timeout=60)
    assert leads(a), "the intake moved to B before the message: A would not run it"
    trigger.arm(cut, killer(a))
    ask()
    wait_until(lambda: trigger.fired and a.proc is not None and a.proc.poll() is not None, 30)
    return time.monotonic()  # (about) when A died


def finish(b: GatewayProcess, count: Callable[[], int], killed: float) -> None:
    """Wait for the reply's three parts (the takeover: A's lease, then B's sweep) and for B's
    replay to end: no part can come later (A is dead), so a doubled one shows by then. B
    stops cleanly."""
    wait_until(lambda: count() >= 3, timeout=LEASE_S * 10)
    wait_until(lambda: bool(logged(b, "replay.platform_done")), timeout=10)
    print(f"B finished the reply {time.monotonic() - killed:.1f} s after A went")
    b.signal(signal.SIGTERM)
    assert b.wait(30) == 0


def taken_over(b: GatewayProcess) -> None:
    """B's sweep replayed the reply (not a second run): one resend, from the part cut on."""
    assert logged(b, "cluster.takeover"), b.stderr()
    starts = logged(b, "replay.start")
    assert [(s["resends"], s["reruns"]) for s in starts] == [(1, 0)], starts


# -- Telegram: one poller per bot in the cluster, A leads ------------------------------------


@pytest.fixture
def tg() -> Iterator[KillingTelegram]:
    fake = KillingTelegram().start()
    try:
        yield fake
    finally:
        fake.stop()


@ALL_SLOW
def test_telegram_a_part_in_doubt_at_a_failover_is_probed_not_sent_twice(
    tmp_path: Path, llm: FakeOpenAI, tg: KillingTelegram, shared: Urls, cut: str
) -> None:
    config = gateway_config(tg, llm, [CHAT])
    a, b = (instance(n, tmp_path, shared, config) for n in ("a", "b"))
    llm.push(text("\n\n".join(paragraphs(400))))  # three Telegram messages
    try:
        killed = take_over(
            a,
            b,
            tg.trigger,
            cut,
            lambda: tg.send_text(CHAT, "three parts"),
            leads=lambda gw: bool(logged(gw, "telegram.poller_leading")),
            stands_by=lambda gw: bool(logged(gw, "telegram.poller_standby")),
        )
        finish(b, lambda: len(tg.messages_to(CHAT)), killed)
    finally:
        a.kill()
        b.kill()
    shown = [m["text"].split()[0] for m in tg.messages_to(CHAT)]
    assert shown == ["part1", "part2", "part3"], (shown, b.stderr())
    assert len(llm.requests) == 1
    probes = [p for name, p in tg.calls if name == "editMessageText"]
    assert probes, "the part in doubt was not checked"
    taken_over(b)


# -- Discord: the one shard is A's, B stands by ------------------------------------------------


@pytest.fixture
def dc() -> Iterator[KillingDiscord]:
    fake = KillingDiscord().start()
    try:
        yield fake
    finally:
        fake.stop()
    assert fake.errors == []


def serving(gw: GatewayProcess, bot_id: int) -> list[int] | None:
    """The shards this instance connects, from its own `/status` (None before it knows)."""
    shares = status(gw).get("shares", {}).get(f"discord:{bot_id}:shard")
    return None if shares is None else list(shares.get("held", []))


@ALL_SLOW
def test_discord_a_part_in_doubt_at_a_failover_is_answered_by_its_nonce(
    tmp_path: Path, llm: FakeOpenAI, dc: KillingDiscord, shared: Urls, cut: str
) -> None:
    section = {
        "enabled": True,
        "token": "dc-token",
        "api_base": dc.api_base,
        "gateway_url": dc.gateway_url,
        "cdn_base": dc.cdn_base,
        "allowed_users": [ALICE],
        "guild_ready_timeout_s": 0.05,
        "identify_delay_s": 0,
        "sync_commands": False,
    }
    model = {"base_url": llm.base_url, "api_key": keys.MODEL_KEY, "max_retries": 0}
    config = {"model": model, "platforms": {"discord": section}}
    a, b = (instance(n, tmp_path, shared, config) for n in ("a", "b"))
    bot = int(dc.bot_user["id"])
    llm.push(text("\n\n".join(paragraphs(280))))  # three messages of up to 2000 characters
    try:
        killed = take_over(
            a,
            b,
            dc.trigger,
            cut,
            lambda: dc.send_dm("three", user_id=ALICE),
            leads=lambda gw: serving(gw, bot) == [0],
            stands_by=lambda gw: serving(gw, bot) == [],
        )
        finish(b, lambda: len(dc.sent), killed)
    finally:
        a.kill()
        b.kill()
    assert [m["content"].split()[0] for m in dc.sent] == ["part1", "part2", "part3"]
    assert len(llm.requests) == 1
    assert len(dc.nonce_hits) == 1  # B's post of the part cut was answered with A's
    taken_over(b)


# -- Slack over HTTP events: the event is posted to A ----------------------------------------


@pytest.fixture
def slack() -> Iterator[KillingSlack]:
    fake = KillingSlack(bot_token=keys.SLACK_BOT_TOKEN).start()
    try:
        yield fake
    finally:
        fake.stop()


def slack_config(slack: KillingSlack, llm: FakeOpenAI) -> dict[str, Any]:
    section = {
        "enabled": True,
        "mode": "http",
        "bot_token": keys.SLACK_BOT_TOKEN,
        "signing_secret": keys.SLACK_SIGNING_SECRET,
        "api_base": slack.api_base,
        "allowed_users": ["U123"],
        "progress": "none",
        "message_limit": 2000,
    }
    model = {"base_url": llm.base_url, "api_key": keys.MODEL_KEY, "max_retries": 0}
    return {"model": model, "platforms": {"slack": section}}


def asker(slack: KillingSlack, gw: GatewayProcess) -> Callable[[], None]:
    """A DM posted (signed, over HTTP events) to ``gw``: the instance that runs it."""

    def ask() -> None:
        event = make_message_event("three parts", "U123", "D1", slack.next_ts(), channel_type="im")
        answer = slack.post_event(f"{gw.url}/slack/events", event, **SIGNED)
        assert answer[0] == 200, answer

    return ask


def ready(gw: GatewayProcess) -> bool:
    return bool(logged(gw, "gateway.ready"))


@PARTS
def test_slack_a_part_in_doubt_at_a_failover_is_found_in_the_history(
    tmp_path: Path, llm: FakeOpenAI, slack: KillingSlack, shared: Urls, cut: str
) -> None:
    a, b = (instance(n, tmp_path, shared, slack_config(slack, llm)) for n in ("a", "b"))
    llm.push(text("\n\n".join(paragraphs(280))))
    try:
        killed = take_over(a, b, slack.trigger, cut, asker(slack, a), leads=ready, stands_by=ready)
        finish(b, lambda: len(slack.messages_in("D1")), killed)
    finally:
        a.kill()
        b.kill()
    assert [m["text"].split()[0] for m in slack.messages_in("D1")] == ["part1", "part2", "part3"]
    assert len(llm.requests) == 1
    lookups = slack.calls_to("conversations.history") + slack.calls_to("conversations.replies")
    assert lookups and all(c.get("include_all_metadata") in ("1", "true", True) for c in lookups)
    taken_over(b)


def pauser(gw: GatewayProcess) -> Callable[[], None]:
    def pause() -> None:
        assert gw.proc is not None
        os.kill(gw.proc.pid, signal.SIGSTOP)

    return pause


def test_an_instance_paused_mid_reply_sends_no_part_once_another_took_the_session(
    tmp_path: Path, llm: FakeOpenAI, slack: KillingSlack, shared: Urls
) -> None:
    """A is SIGSTOPped once Slack took part 1, past its lease; B takes the session over and
    finishes the reply; A, continued, must not send parts 2 and 3 as well: its next intent is
    refused under its stale fencing token."""
    a, b = (instance(n, tmp_path, shared, slack_config(slack, llm)) for n in ("a", "b"))
    llm.push(text("\n\n".join(paragraphs(280))))
    posted = lambda: len(slack.messages_in("D1"))  # noqa: E731
    try:
        a.start(wait=False).wait_healthy(90)
        wait_until(lambda: ready(a), timeout=60)
        b.start(wait=False).wait_healthy(90)
        wait_until(lambda: ready(b), timeout=60)
        slack.trigger.arm("part1", pauser(a))
        asker(slack, a)()
        wait_until(lambda: slack.trigger.fired, timeout=30)
        paused = time.monotonic()
        # B claimed the session (its token is in the store) before it logs the takeover;
        # A goes on before the 10 s its Slack call waits for an answer (a timeout would retry
        # part 1 in process, which no check covers on Slack)
        wait_until(lambda: bool(logged(b, "cluster.takeover")), timeout=LEASE_S * 10)
        a.signal(signal.SIGCONT)
        finish(b, posted, paused)
        wait_until(lambda: bool(logged(a, "delivery.fenced_out")) or posted() > 3, timeout=30)
        time.sleep(1)  # a part A sent late would show now
    finally:
        a.kill()
        b.kill()
    assert [m["text"].split()[0] for m in slack.messages_in("D1")] == ["part1", "part2", "part3"]
    assert logged(a, "delivery.fenced_out"), a.stderr()
    assert len(llm.requests) == 1
    taken_over(b)


SIGNED = {"signing_secret": keys.SLACK_SIGNING_SECRET}
