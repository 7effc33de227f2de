"""The dashboard in a real browser (Debian's chromium, headless, driven by Playwright) against a
real `hermes gateway run` on the fake Telegram and the fake model (with the scheduler and the
`cronjob` tool for the Jobs page). Screenshots of every page go to the test's tmp directory
(`screenshots/`)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.e2e.daemon import GatewayProcess
from tests.fakes.openai import FakeOpenAI, Response, hang, text, tool_calls
from tests.fakes.server import wait_until
from tests.fakes.telegram import FakeTelegram

CHROMIUM = "/usr/bin/chromium"
pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(
        not Path(CHROMIUM).exists(), reason=f"{CHROMIUM} is absent (apt-get install chromium)"
    ),
    pytest.mark.filterwarnings("ignore::telegram.warnings.PTBDeprecationWarning"),
]
TOKEN = "123:ABC"
CONTROL_TOKEN = "dash-token-0123456789abcdef"
HOSTILE = "<img src=x onerror=window.pwned=1><script>window.pwned=2</script>"
WAIT_MS = 30_000


@pytest.fixture(scope="module")
def playwright() -> Iterator[Any]:
    """One Playwright per module: a second one started while it runs finds its event loop and
    refuses (the sync API drives a loop of its own on this thread)."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        yield p


@pytest.fixture(scope="module")
def browser(playwright: Any) -> Iterator[Any]:
    args = ["--no-sandbox"] if os.geteuid() == 0 else []  # root in the test namespace
    browser = playwright.chromium.launch(executable_path=CHROMIUM, args=args)
    yield browser
    browser.close()


@pytest.fixture
def tg() -> Iterator[FakeTelegram]:
    with FakeTelegram(token=TOKEN) as fake:
        yield fake


@pytest.fixture
def shots(tmp_path: Path) -> Path:
    path = tmp_path / "screenshots"
    path.mkdir()
    return path


def _gateway(tmp_path: Path, llm: FakeOpenAI, tg: FakeTelegram, **extra: Any) -> GatewayProcess:
    config: dict[str, Any] = {
        "model": {"base_url": llm.base_url, "api_key": "sk-fake", "max_retries": 0},
        "dashboard": {"sample_interval_s": 1, "push_interval_s": 0.3},
        "runner": {"stop_grace_s": 0.5},
        "platforms": {
            "telegram": {
                "enabled": True,
                "token": TOKEN,
                "base_url": tg.api_url,
                "base_file_url": tg.file_url,
                "pairing": True,
            }
        },
        **extra,
    }
    return GatewayProcess(tmp_path / "home", config).start()


@pytest.fixture
def gw(tmp_path: Path, fake_llm: FakeOpenAI, tg: FakeTelegram) -> Iterator[GatewayProcess]:
    gateway = _gateway(tmp_path, fake_llm, tg)
    yield gateway
    gateway.kill()


@pytest.fixture
def page(browser: Any) -> Iterator[Any]:
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.on(
        "console", lambda m: errors.append(m.text) if "Content Security Policy" in m.text else None
    )
    yield page
    context.close()
    assert not errors, errors  # no script error, no CSP violation on any page


def _log_in(page: Any, gw: GatewayProcess) -> None:
    """As an operator does: `hermes dashboard` (which reads the gateway's token file) prints a
    one-time link, and the browser opens it."""
    argv = ["dashboard", "--config", str(gw.config_path), "--url", gw.url, "--no-open"]
    printed = subprocess.run(
        [sys.executable, "-m", "hermes_gateway", *argv],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout
    page.goto(printed.splitlines()[0])
    assert page.url == f"{gw.url}/dashboard/"  # the link left the address bar


def _platform(page: Any, name: str, ready: bool) -> None:
    page.wait_for_selector(
        f'[data-platform="{name}"][data-ready="{str(ready).lower()}"]', timeout=WAIT_MS
    )


@pytest.mark.slow  # ~55 s: waits out a platform outage and a gateway restart
def test_the_overview_shows_a_platform_go_down_and_up_and_survives_a_restart(
    gw: GatewayProcess, tg: FakeTelegram, page: Any, shots: Path
) -> None:
    _log_in(page, gw)
    page.goto(f"{gw.url}/dashboard/")
    _platform(page, "telegram", True)
    page.wait_for_selector("#conn.live", timeout=WAIT_MS)
    page.wait_for_selector("[data-chart] canvas", timeout=WAIT_MS)  # uPlot drew the charts
    assert page.locator("[data-chart]").count() == 6
    page.screenshot(path=shots / "overview.png", full_page=True)
    tg.fail_next("getUpdates", status=500, times=6)
    _platform(page, "telegram", False)
    detail = page.inner_text('[data-platform="telegram"] .detail')
    assert "polling failing" in detail
    assert "telegram: polling failing" in page.inner_text("#reasons")
    page.screenshot(path=shots / "overview-telegram-down.png", full_page=True)
    _platform(page, "telegram", True)

    gw.signal(signal.SIGTERM)
    assert gw.wait(20) == 0
    page.wait_for_selector("#conn.wait", timeout=WAIT_MS)
    assert page.inner_text("#conn") == "reconnecting…"
    page.screenshot(path=shots / "overview-reconnecting.png", full_page=True)
    gw.start()
    page.wait_for_selector("#conn.live", timeout=WAIT_MS)
    _platform(page, "telegram", True)


def test_a_chat_streams_its_answer_and_markup_stays_text(
    gw: GatewayProcess, fake_llm: FakeOpenAI, page: Any, shots: Path
) -> None:
    answer = "This answer arrives in pieces, a few letters at a time."
    fake_llm.push(text(answer, chunk_size=4, chunk_delay=0.1))
    _log_in(page, gw)
    page.goto(f"{gw.url}/dashboard/chat")
    page.wait_for_selector("#conn.live", timeout=WAIT_MS)
    page.fill("textarea", "tell me something")
    page.click("#chat-form button")
    # seen part-way: the bubble holds some of the answer while it is still streaming
    page.wait_for_function(
        """full => [...document.querySelectorAll('li.assistant pre.streaming')].some(
               p => p.textContent.length > 0 && p.textContent.length < full.length)""",
        arg=answer,
        timeout=WAIT_MS,
    )
    page.wait_for_selector("li.assistant pre.done", timeout=WAIT_MS)
    assert page.inner_text("li.assistant pre.done") == answer

    page.fill("textarea", HOSTILE)
    page.click("#chat-form button")
    page.wait_for_function(
        "() => document.querySelectorAll('li.assistant pre.done').length === 2", timeout=WAIT_MS
    )
    assert page.locator("li.user pre").nth(1).inner_text() == HOSTILE
    assert page.locator("li.assistant pre.done").nth(1).inner_text() == f"echo: {HOSTILE}"
    assert page.locator("#chat img").count() == 0
    assert page.evaluate("window.pwned") is None
    page.screenshot(path=shots / "chat.png", full_page=True)

    page.goto(f"{gw.url}/dashboard/session?key=api:dm:dashboard")  # the history, server-side
    assert HOSTILE in page.inner_text("#history")
    assert page.evaluate("window.pwned") is None
    page.screenshot(path=shots / "session.png", full_page=True)


def test_stop_on_a_running_session_stops_it(
    gw: GatewayProcess, fake_llm: FakeOpenAI, page: Any, shots: Path
) -> None:
    fake_llm.push(hang(60))
    replies: list[httpx.Response] = []
    asking = threading.Thread(
        target=lambda: replies.append(gw.chat("think for a long time", user="bob", timeout=60))
    )
    asking.start()
    _log_in(page, gw)
    page.goto(f"{gw.url}/dashboard/sessions")
    row = 'tr[data-key="api:dm:bob"]'
    page.wait_for_selector(f"{row} button[data-stop]", timeout=WAIT_MS)
    assert page.inner_text(f"{row} .state") == "running"
    assert "think for a long time" in page.inner_text(row)
    page.screenshot(path=shots / "sessions.png", full_page=True)
    page.click(f"{row} button[data-stop]")
    page.wait_for_selector(row, state="detached", timeout=WAIT_MS)
    asking.join(30)
    assert replies and replies[0].json()["choices"][0]["message"]["content"] == "Stopped."
    assert page.locator("#empty").is_visible()


def test_a_pairing_approval_works(
    gw: GatewayProcess, tg: FakeTelegram, page: Any, shots: Path
) -> None:
    tg.send_text(777, "hello", username=HOSTILE)
    wait_until(lambda: tg.messages_to(777), timeout=20)  # the code, sent to the user
    _log_in(page, gw)
    page.goto(f"{gw.url}/dashboard/pairing")
    pending = 'tr[data-user="777"][data-status="pending"]'
    page.wait_for_selector(pending, timeout=WAIT_MS)
    assert page.locator(f"{pending} td").nth(4).inner_text() == HOSTILE  # the name, as text
    assert page.evaluate("window.pwned") is None
    page.screenshot(path=shots / "pairing.png", full_page=True)
    page.click(f"{pending} button")
    page.wait_for_selector('tr[data-user="777"][data-status="approved"]', timeout=WAIT_MS)
    wait_until(lambda: len(tg.messages_to(777)) >= 2, timeout=20)
    assert tg.messages_to(777)[-1]["text"] == "You're approved. Say hi!"
    tg.send_text(777, "now let me in", username=HOSTILE)
    wait_until(lambda: len(tg.messages_to(777)) >= 3, timeout=20)
    assert tg.messages_to(777)[-1]["text"] == "echo: now let me in"


def test_without_the_token_every_page_and_action_is_refused(
    tmp_path: Path, fake_llm: FakeOpenAI, tg: FakeTelegram, page: Any, shots: Path
) -> None:
    control = {"host": "0.0.0.0", "token": CONTROL_TOKEN}  # a non-loopback setup
    gw = _gateway(tmp_path, fake_llm, tg, control=control)
    try:
        base = f"{gw.url}/dashboard"
        pages = ("/", "/sessions", "/inbox", "/jobs", "/logs", "/pairing", "/chat")
        for path in (*pages, "/session?key=x"):
            page.goto(base + path)
            assert page.url == f"{base}/login", path
            assert page.locator("input[name=token]").is_visible()
        actions = ("/api/sessions/stop", "/api/inbox/1/retry", "/api/pairing/approve")
        for action in (*actions, "/api/jobs/abc/run"):
            response = page.request.post(base + action, data={"key": "x"})
            assert response.status == 401, action
        assert page.request.get(f"{base}/events/overview").status == 401
        page.fill("input[name=token]", "wrong-token-000000000000")
        page.click("button[type=submit]")
        assert page.inner_text("#login-error") == "Wrong token."
        page.screenshot(path=shots / "login.png", full_page=True)

        page.fill("input[name=token]", CONTROL_TOKEN)
        page.click("button[type=submit]")
        page.wait_for_selector("#conn.live", timeout=WAIT_MS)
        assert page.url == f"{base}/"
        # logged in, an action still needs the page's CSRF token
        assert page.request.post(f"{base}/api/sessions/stop", data={"key": "x"}).status == 403
        page.goto(f"{base}/logs")
        page.wait_for_selector("#logs tbody tr", timeout=WAIT_MS)
        assert "gateway.ready" in page.inner_text("#logs")
        assert CONTROL_TOKEN not in page.content()
        page.screenshot(path=shots / "logs.png", full_page=True)
        page.goto(f"{base}/inbox")
        page.wait_for_selector("#empty:not([hidden])", timeout=WAIT_MS)
        page.screenshot(path=shots / "inbox.png", full_page=True)
    finally:
        gw.kill()


STRETCH = "Tell the user it is time to stretch."


def _scheduling(tmp_path: Path, llm: FakeOpenAI, tg: FakeTelegram) -> GatewayProcess:
    telegram = {"enabled": True, "token": TOKEN, "base_url": tg.api_url}
    telegram |= {"base_file_url": tg.file_url, "allowed_users": [555]}
    return _gateway(
        tmp_path,
        llm,
        tg,
        platforms={"telegram": telegram},
        tools={"enabled": ["cronjob"]},
        scheduler={"enabled": True, "timezone": "UTC", "tick_s": 0.2},
    )


def _model(body: dict[str, Any]) -> Response:
    """The chat's turn creates a nightly job; the job's own turn answers with markup."""
    said = str(body["messages"][-1].get("content") or "")
    if body["messages"][-1]["role"] == "tool":
        return text(f"Done. {said}")
    if STRETCH in said:
        return text(f"Stretch now! {HOSTILE}")
    if "every night" in said:
        create = {"action": "create", "prompt": STRETCH, "schedule": "0 3 * * *"}
        return tool_calls(("cronjob", create | {"name": "nightly <b>stretch</b>"}))
    return text(f"echo: {said}")


def test_the_jobs_page_runs_pauses_and_resumes_a_job(
    tmp_path: Path, fake_llm: FakeOpenAI, tg: FakeTelegram, page: Any, shots: Path
) -> None:
    fake_llm.responder = _model
    gw = _scheduling(tmp_path, fake_llm, tg)
    try:
        tg.send_text(555, "every night at 3, remind me to stretch")
        wait_until(lambda: tg.messages_to(555), timeout=20)
        _log_in(page, gw)
        page.goto(f"{gw.url}/dashboard/jobs")
        job = "#jobs tr.job"
        page.wait_for_selector(f'{job}[data-state="active"]', timeout=WAIT_MS)
        cells = [page.locator(f"{job} td").nth(i).inner_text() for i in range(7)]
        assert cells[0] == "nightly <b>stretch</b>"  # the name, as text
        assert cells[1:4] == ["telegram:555", "0 3 * * *", "UTC"]
        assert cells[4].endswith("03:00 UTC") and cells[6] == "0"
        assert "No runs yet." in page.inner_text("#jobs tr.detail")

        page.click(f"{job} button:has-text('Run now')")
        done = '#jobs tr[data-run][data-status="succeeded"]'
        page.wait_for_selector(done, timeout=WAIT_MS)
        page.wait_for_selector(f"{done} td.delivery:has-text('delivered')", timeout=WAIT_MS)
        assert page.inner_text(f"{done} pre.output") == f"Stretch now! {HOSTILE}"
        assert page.locator("#jobs img, #jobs b").count() == 0
        assert page.evaluate("window.pwned") is None
        assert tg.messages_to(555)[-1]["text"].startswith("Stretch now!")
        page.screenshot(path=shots / "jobs.png", full_page=True)

        page.click(f"{job} button:has-text('Pause')")
        page.wait_for_selector(f'{job}[data-state="paused"]', timeout=WAIT_MS)
        assert page.locator(f"{job} button:has-text('Pause')").count() == 0
        page.click(f"{job} button:has-text('Resume')")
        page.wait_for_selector(f'{job}[data-state="active"]', timeout=WAIT_MS)
        jobs = httpx.get(f"{gw.url}/v1/cron/jobs", headers=gw.operator, timeout=5)
        [listed] = jobs.json()["jobs"]
        assert (listed["state"], listed["runs"]) == ("active", 0)  # run now left the schedule
    finally:
        gw.kill()


def test_the_inbox_shows_an_answer_the_platform_refused(
    tmp_path: Path, fake_llm: FakeOpenAI, tg: FakeTelegram, page: Any, shots: Path
) -> None:
    gw = _scheduling(tmp_path, fake_llm, tg)
    try:
        tg.fail_next("sendMessage", status=403, times=3)  # the user blocked the bot
        tg.send_text(555, f"are you there? {HOSTILE}")
        _log_in(page, gw)
        page.goto(f"{gw.url}/dashboard/inbox")
        row = "#undeliverable tbody tr"
        page.wait_for_selector(row, timeout=WAIT_MS)
        assert page.locator(f"{row} td.text").nth(0).inner_text() == f"are you there? {HOSTILE}"
        assert page.inner_text(f"{row} td.reply") == f"echo: are you there? {HOSTILE}"
        assert page.locator("main img").count() == 0
        assert page.evaluate("window.pwned") is None
        assert page.locator("#empty").is_visible()  # nothing quarantined
        assert page.locator("#waiting-empty").is_visible()
        page.screenshot(path=shots / "inbox-undeliverable.png", full_page=True)
    finally:
        gw.kill()


@pytest.mark.parametrize("insecure_cookie", [False, True])
def test_a_login_over_plain_http_to_a_lan_name_explains_or_works(
    tmp_path: Path,
    fake_llm: FakeOpenAI,
    tg: FakeTelegram,
    insecure_cookie: bool,
    playwright: Any,
) -> None:
    """Chromium reaches the gateway as http://gateway.lan (mapped to 127.0.0.1): not a secure
    context, so it drops a Secure cookie. The answer says so; with the setting it just works."""
    control = {"host": "0.0.0.0", "token": CONTROL_TOKEN}
    dashboard = {"insecure_cookie": insecure_cookie}
    gw = _gateway(tmp_path, fake_llm, tg, control=control, dashboard=dashboard)
    try:
        args = ["--host-resolver-rules=MAP gateway.lan 127.0.0.1"]
        args += ["--no-sandbox"] if os.geteuid() == 0 else []
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=args)
        try:
            page = browser.new_page()
            base = f"http://gateway.lan:{gw.port}/dashboard"
            page.goto(f"{base}/login")
            page.fill("input[name=token]", CONTROL_TOKEN)
            page.click("button[type=submit]")
            if insecure_cookie:
                page.wait_for_url(f"{base}/", timeout=WAIT_MS)
                assert page.locator("#charts").count() == 1
            else:
                assert "The token was right" in page.inner_text("#insecure-cookie")
                page.click("#insecure-cookie a")  # the browser kept no cookie: the form again
                page.wait_for_url(f"{base}/login", timeout=WAIT_MS)
        finally:
            browser.close()
    finally:
        gw.kill()
