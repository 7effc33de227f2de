"""Malformed input to the control port, against the real process with the chat API, the
Telegram webhook and the Slack Events endpoint mounted: each is answered with a 4xx (never a
500, never Slack's 200 ack) and leaves no traceback in the log; a lone surrogate in a message
is answered like any other text, on the API and on a platform."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.e2e.daemon import GatewayProcess
from tests.fakes.openai import FakeOpenAI
from tests.fakes.server import wait_until
from tests.fakes.slack import FakeSlack, make_message_event, make_url_verification, sign_request
from tests.fakes.telegram import FakeTelegram
from tests.hostile import rawhttp

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.filterwarnings("ignore::telegram.warnings.PTBDeprecationWarning"),
]
TOKEN = "ctl-token"
AUTH = {"Authorization": f"Bearer {TOKEN}".encode()}
SLACK_SECRET = "s3cret"
TG_SECRET = "tg-secret"
ALICE = "U0ALICE"


@pytest.fixture(scope="module")
def fakes() -> Iterator[tuple[FakeTelegram, FakeSlack]]:
    with FakeTelegram(token="123:ABC") as tg, FakeSlack() as slack:
        yield tg, slack


@pytest.fixture(scope="module")
def gateway(
    tmp_path_factory: pytest.TempPathFactory,
    openai_server: FakeOpenAI,
    fakes: tuple[FakeTelegram, FakeSlack],
) -> Iterator[GatewayProcess]:
    tg, slack = fakes
    telegram = {
        "enabled": True,
        "token": "123:ABC",
        "base_url": tg.api_url,
        "base_file_url": tg.file_url,
        "mode": "webhook",
        "webhook_url": "http://127.0.0.1:9/telegram/webhook",  # Telegram itself never calls
        "webhook_secret": TG_SECRET,
        "allowed_users": [555],
    }
    slack_section = {
        "enabled": True,
        "mode": "http",
        "bot_token": slack.bot_token,
        "signing_secret": SLACK_SECRET,
        "api_base": slack.api_base,
        "allowed_users": [ALICE],
    }
    config: dict[str, Any] = {
        "model": {"base_url": openai_server.base_url, "api_key": "sk-fake", "max_retries": 0},
        "control": {"token": TOKEN},
        "platforms": {"telegram": telegram, "slack": slack_section},
        "scheduler": {"enabled": True},  # its routes are among those that read JSON
    }
    gw = GatewayProcess(tmp_path_factory.mktemp("malformed") / "home", config)
    try:
        gw.start()
        ready = {"Authorization": f"Bearer {TOKEN}"}
        wait_until(lambda: httpx.get(f"{gw.url}/readyz", headers=ready).status_code == 200)
        yield gw
    finally:
        gw.kill()


def chat_body(content: str = "hi", **extra: Any) -> bytes:
    body = {"user": "bad", "messages": [{"role": "user", "content": content}], **extra}
    return json.dumps(body).encode()


DEEP = b'{"user": "bad", "messages": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"
HUGE_INT = chat_body()[:-1] + b', "n": ' + b"7" * 5000 + b"}"
CHAT_CASES = {
    "deeply nested JSON": (DEEP, AUTH, 400),
    "an integer of 5,000 digits": (HUGE_INT, AUTH, 400),
    "a non-UTF-8 Authorization header": (chat_body(), {"Authorization": b"Bearer \xff\xfe"}, 400),
}


def log_mark(gw: GatewayProcess) -> int:
    return len(gw.log_events())


def no_tracebacks(gw: GatewayProcess, since: int) -> None:
    """Nothing logged at ERROR or with a traceback since ``since`` log lines."""
    time.sleep(0.3)  # the log is written from a queue, just after the answer
    new = gw.log_events()[since:]
    assert [e for e in new if "exception" in e or e.get("level") in ("error", "critical")] == []
    assert "Traceback" not in gw.stderr()


@pytest.mark.parametrize("case", list(CHAT_CASES))
def test_malformed_chat_requests_get_a_json_400(gateway: GatewayProcess, case: str) -> None:
    since = log_mark(gateway)
    body, headers, want = CHAT_CASES[case]
    status, answer = rawhttp.exchange(
        gateway.port, rawhttp.post("/v1/chat/completions", body, headers)
    )
    assert status == want
    assert json.loads(answer)["error"]["type"] == "invalid_request_error"
    no_tracebacks(gateway, since)


RAW_CASES = {
    "a header line of backslashes": b"GET /healthz HTTP/1.1\r\nHost: x\r\n"
    + b"\\" * 8192
    + b"\r\nConnection: close\r\n\r\n",
    "a broken request line": b"GET /healthz HTTP/9\x00\r\nConnection: close\r\n\r\n",
    "a bad content length": b"POST /v1/chat/completions HTTP/1.1\r\nContent-Length: -1\r\n\r\n",
}


@pytest.mark.parametrize("case", list(RAW_CASES))
def test_unparseable_requests_get_a_json_400_and_no_traceback(
    gateway: GatewayProcess, case: str
) -> None:
    since = log_mark(gateway)
    status, answer = rawhttp.exchange(gateway.port, RAW_CASES[case])
    assert status == 400
    assert json.loads(answer)["error"]["code"] == "bad_request"
    no_tracebacks(gateway, since)


def test_a_non_utf8_telegram_secret_header_is_refused(gateway: GatewayProcess) -> None:
    since = log_mark(gateway)
    update = json.dumps({"update_id": 1}).encode()
    headers = {"X-Telegram-Bot-Api-Secret-Token": b"tg-secret\xff"}
    status, _ = rawhttp.exchange(gateway.port, rawhttp.post("/telegram/webhook", update, headers))
    assert 400 <= status < 500
    no_tracebacks(gateway, since)


def test_a_deeply_nested_telegram_update_is_refused(gateway: GatewayProcess) -> None:
    """Only a sender holding the secret gets this far; it still gets a 400, not a 500."""
    since = log_mark(gateway)
    update = b"[" * 100_000 + b"]" * 100_000
    headers = {"X-Telegram-Bot-Api-Secret-Token": TG_SECRET.encode()}
    status, _ = rawhttp.exchange(gateway.port, rawhttp.post("/telegram/webhook", update, headers))
    assert status == 400
    no_tracebacks(gateway, since)


def slack_post(gw: GatewayProcess, body: bytes, headers: dict[str, str]) -> httpx.Response:
    sent = {"Content-Type": "application/json", **headers}
    return httpx.post(f"{gw.url}/slack/events", content=body, headers=sent, timeout=10)


@pytest.mark.parametrize("stamp", ["abc", "123.5", "", "-5", "1" * 40, "stale"])
def test_slack_requests_with_a_bad_timestamp_get_401(gateway: GatewayProcess, stamp: str) -> None:
    since = log_mark(gateway)
    body = json.dumps(make_url_verification()).encode()
    if stamp == "stale":
        headers = sign_request(SLACK_SECRET, body, int(time.time()) - 3600)
    else:
        headers = sign_request(SLACK_SECRET, body, 0)
        headers["X-Slack-Request-Timestamp"] = stamp
    assert slack_post(gateway, body, headers).status_code == 401
    no_tracebacks(gateway, since)


def test_unsigned_slack_bodies_are_refused_before_bolt_sees_them(gateway: GatewayProcess) -> None:
    since = log_mark(gateway)
    body = json.dumps(make_url_verification("secret-challenge")).encode()
    headers = sign_request(SLACK_SECRET + "-wrong", body, int(time.time()))
    assert slack_post(gateway, body, headers).status_code == 401
    big = b'{"pad": "' + b"\\" * (2 * 1024 * 1024) + b'"}'
    assert slack_post(gateway, big, headers).status_code == 413  # never read past the limit
    signed = sign_request(SLACK_SECRET, body, int(time.time()))
    good = slack_post(gateway, body, signed)
    assert good.status_code == 200 and "secret-challenge" in good.text  # the route works
    logged = (gateway.home / "logs" / "gateway.log").read_text()
    assert logged.count("secret-challenge") <= 1  # only the signed one may reach bolt's log
    assert "\\\\\\\\\\\\\\\\" not in logged
    no_tracebacks(gateway, since)


def test_a_lone_surrogate_is_answered_on_the_api(
    gateway: GatewayProcess, fake_llm: FakeOpenAI
) -> None:
    since = log_mark(gateway)
    body = b'{"user": "sur", "messages": [{"role": "user", "content": "hi \\ud800 there"}]}'
    status, answer = rawhttp.exchange(
        gateway.port, rawhttp.post("/v1/chat/completions", body, AUTH), timeout=30
    )
    assert status == 200
    assert json.loads(answer)["choices"][0]["message"]["content"] == "echo: hi \ufffd there"
    no_tracebacks(gateway, since)


def test_a_lone_surrogate_is_answered_on_a_platform(
    gateway: GatewayProcess, fake_llm: FakeOpenAI, fakes: tuple[FakeTelegram, FakeSlack]
) -> None:
    since = log_mark(gateway)
    _, slack = fakes
    event = make_message_event("ping \ud800 pong", ALICE, "D1", slack.next_ts())
    status, _ = slack.post_event(f"{gateway.url}/slack/events", event, signing_secret=SLACK_SECRET)
    assert status == 200
    wait_until(lambda: slack.messages_in("D1"), timeout=20)
    assert [m["text"] for m in slack.messages_in("D1")] == ["echo: ping \ufffd pong"]
    no_tracebacks(gateway, since)


# nested past any limit, and small enough for the webhooks' 256 KiB
BRACKETS = b"[" * 100_000 + b"]" * 100_000
TOKEN_ROUTES = ["/v1/chat/completions", "/pairing/approve", "/pairing/revoke", "/v1/cron/jobs"]
DASHBOARD_ROUTES = [
    "/api/sessions/stop",
    "/api/pairing/approve",
    "/api/pairing/revoke",
    "/api/chat",
]


def dashboard_headers(gw: GatewayProcess) -> dict[str, bytes]:
    """A logged-in dashboard session's cookie and CSRF token."""
    base = f"{gw.url}/dashboard"
    form = httpx.get(f"{base}/login", timeout=10)
    found = re.search(r'name="csrf" value="([0-9a-f]+)"', form.text)
    assert found is not None
    login = httpx.post(
        f"{base}/login",
        data={"csrf": found.group(1), "token": TOKEN},
        cookies=form.cookies,
        timeout=10,
    )
    assert login.status_code == 303, login.text
    cookie = f"hermes_dashboard={login.cookies['hermes_dashboard']}"
    page = httpx.get(f"{base}/sessions", headers={"Cookie": cookie}, timeout=10)
    csrf = re.search(r'name="csrf" content="([0-9a-f]+)"', page.text)
    assert csrf is not None
    return {"Cookie": cookie.encode(), "X-CSRF-Token": csrf.group(1).encode()}


def deep_post(gw: GatewayProcess, route: str) -> tuple[str, dict[str, bytes]]:
    """The path and headers that take a body of ``BRACKETS`` past ``route``'s access check."""
    if route in TOKEN_ROUTES:
        return route, AUTH
    if route == "/telegram/webhook":
        return route, {"X-Telegram-Bot-Api-Secret-Token": TG_SECRET.encode()}
    if route == "/slack/events":  # correctly signed: only bolt's parse stood in its way
        signed = sign_request(SLACK_SECRET, BRACKETS, int(time.time()))
        return route, {k: v.encode() for k, v in signed.items()}
    return f"/dashboard{route}", dashboard_headers(gw)


@pytest.mark.parametrize(
    "route", [*TOKEN_ROUTES, "/telegram/webhook", "/slack/events", *DASHBOARD_ROUTES]
)
def test_deep_json_is_a_400_on_every_route_that_reads_json(
    gateway: GatewayProcess, route: str
) -> None:
    since = log_mark(gateway)
    path, headers = deep_post(gateway, route)
    status, answer = rawhttp.exchange(gateway.port, rawhttp.post(path, BRACKETS, headers))
    assert status == 400, answer[:300]
    assert json.loads(answer)["error"]["code"] == "invalid_json"
    no_tracebacks(gateway, since)


def test_no_route_parses_a_body_but_through_the_bounded_parser() -> None:
    """`request.json()` and `json.loads` on a body are unbounded: only `jsonbody` may parse."""
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    unbounded = re.compile(r"request\.json\(\)|json\.loads\(\s*(await )?request")
    offenders = [
        str(path.relative_to(root))
        for package in ("hermes_gateway", "adapters")
        for path in (root / package).rglob("*.py")
        if unbounded.search(path.read_text("utf-8"))
    ]
    assert offenders == []
