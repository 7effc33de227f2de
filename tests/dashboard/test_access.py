"""Who may use the dashboard: nothing is shown and nothing done without logging in with the
control token (configured or generated); every action needs the page's CSRF token; without a
configured token only loopback clients addressing a loopback host get in at all."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any
from unittest import mock

import aiohttp
import pytest
from aiohttp.test_utils import make_mocked_request

from hermes_gateway.dashboard.auth import COOKIE, LINK_S, SESSION_S, Auth
from hermes_gateway.server import Gateway
from tests.fakes.openai import FakeOpenAI
from tests.harness import make_config, running_gateway

TOKEN = "k3y-for-the-dashboard-0123456789"
PAGES = ["/", "/sessions", "/inbox", "/logs", "/pairing", "/chat", "/session?key=api:dm:a"]
STREAMS = ["overview", "sessions", "inbox", "pairing", "logs"]
ACTIONS = [
    ("/api/sessions/stop", {"key": "api:dm:a"}),
    ("/api/inbox/1/retry", {}),
    ("/api/inbox/1/drop", {}),
    ("/api/pairing/approve", {"platform": "telegram", "code": "ABCDEFGH"}),
    ("/api/pairing/revoke", {"platform": "telegram", "user_id": "1"}),
    ("/api/chat", {"text": "hello"}),
    ("/logout", {}),
]


@pytest.fixture
async def guarded(
    tmp_path: Path, fake_llm: FakeOpenAI
) -> AsyncIterator[tuple[Gateway, aiohttp.ClientSession, str]]:
    config = make_config(tmp_path, fake_llm.base_url, control={"host": "0.0.0.0", "token": TOKEN})
    async with running_gateway(config) as (gw, client):
        yield gw, client.http, f"http://127.0.0.1:{gw.control.port}/dashboard"


async def _login(http: aiohttp.ClientSession, base: str, token: str) -> aiohttp.ClientResponse:
    async with http.get(f"{base}/login") as form:
        csrf = re.search(r'name="csrf" value="([0-9a-f]+)"', await form.text())
    assert csrf is not None
    data = {"csrf": csrf.group(1), "token": token}
    async with http.post(f"{base}/login", data=data, allow_redirects=False) as resp:
        await resp.read()
        return resp


async def test_without_the_token_every_page_and_action_is_refused(guarded: Any) -> None:
    gw, http, base = guarded
    for path in PAGES:
        async with http.get(base + path, allow_redirects=False) as resp:
            assert resp.status == 303, path
            assert resp.headers["Location"] == "/dashboard/login"
    for topic in STREAMS:
        async with http.get(f"{base}/events/{topic}") as resp:
            assert resp.status == 401, topic
    for path, body in ACTIONS:
        async with http.post(base + path, json=body) as resp:
            assert resp.status == 401, path
    # the bearer token of the API is not a dashboard session, and the API wants its token
    async with http.get(f"{base}/", headers={"Authorization": f"Bearer {TOKEN}"}) as resp:
        assert resp.url.path == "/dashboard/login"
    bad = await _login(http, base, "not-the-token")
    assert bad.status == 401 and COOKIE not in bad.cookies
    async with http.get(f"http://127.0.0.1:{gw.control.port}/status") as resp:
        assert resp.status == 401


async def test_a_login_opens_it_and_actions_need_the_csrf_token(guarded: Any) -> None:
    gw, http, base = guarded
    resp = await _login(http, base, TOKEN)
    assert resp.status == 303
    morsel = resp.cookies[COOKIE]
    assert morsel["httponly"] and morsel["secure"] and morsel["samesite"] == "Strict"
    cookie = {"Cookie": f"{COOKIE}={morsel.value}"}  # aiohttp's jar keeps Secure for https
    async with http.get(f"{base}/sessions", headers=cookie) as page:
        assert page.status == 200
        html = await page.text()
    csrf = re.search(r'name="csrf" content="([0-9a-f]+)"', html)
    assert csrf is not None
    stop = {"key": "api:dm:nobody"}
    async with http.post(f"{base}/api/sessions/stop", json=stop, headers=cookie) as resp:
        assert resp.status == 403 and (await resp.json())["error"]["code"] == "csrf"
    wrong = {**cookie, "X-CSRF-Token": "0" * 64}
    async with http.post(f"{base}/api/sessions/stop", json=stop, headers=wrong) as resp:
        assert resp.status == 403
    foreign = {**cookie, "X-CSRF-Token": csrf.group(1), "Origin": "http://evil.example"}
    async with http.post(f"{base}/api/sessions/stop", json=stop, headers=foreign) as resp:
        assert resp.status == 403
    good = {**cookie, "X-CSRF-Token": csrf.group(1)}
    async with http.post(f"{base}/api/sessions/stop", json=stop, headers=good) as resp:
        assert resp.status == 404  # past the guard: nothing runs in that session
        assert (await resp.json())["error"]["code"] == "not_running"
    forged = {"Cookie": f"{COOKIE}=1.{'0' * 64}"}
    async with http.get(f"{base}/sessions", headers=forged, allow_redirects=False) as resp:
        assert resp.status == 303


def _request(peer: str, host: str, cookie: str = "") -> Any:
    transport = mock.Mock()
    transport.get_extra_info.side_effect = lambda name, default=None: (
        (peer, 40000) if name == "peername" else default
    )
    headers = {"Host": host, **({"Cookie": f"{COOKIE}={cookie}"} if cookie else {})}
    return make_mocked_request("GET", "/dashboard/", headers=headers, transport=transport)


def test_without_a_configured_token_only_loopback_clients_of_a_loopback_host_get_in() -> None:
    auth = Auth(lambda: TOKEN, loopback_only=True)
    cookie = auth.login(TOKEN)
    assert cookie is not None
    assert auth.reachable(_request("127.0.0.1", "127.0.0.1:8642"))
    assert auth.reachable(_request("::1", "localhost:8642"))
    assert not auth.reachable(_request("10.0.0.7", "127.0.0.1:8642"))
    # a page from another site that rebound its name to 127.0.0.1
    assert not auth.reachable(_request("127.0.0.1", "evil.example:8642"))
    assert not auth.allowed(_request("127.0.0.1", "evil.example:8642", cookie))
    # reachable is not enough: loopback without a session is refused
    assert not auth.allowed(_request("127.0.0.1", "127.0.0.1:8642"))
    assert auth.allowed(_request("127.0.0.1", "127.0.0.1:8642", cookie))


def test_a_session_cookie_expires_and_dies_with_the_token() -> None:
    now = [1_000_000.0]
    auth = Auth(lambda: TOKEN, loopback_only=False, clock=lambda: now[0])
    cookie = auth.login(TOKEN)
    assert cookie is not None and auth.allowed(_request("10.0.0.7", "gw.example", cookie))
    assert not Auth(lambda: "another-token-0123456789abcdef", loopback_only=False).allowed(
        _request("10.0.0.7", "gw.example", cookie)
    )
    now[0] += SESSION_S + 1
    assert not auth.allowed(_request("10.0.0.7", "gw.example", cookie))


def test_a_login_link_works_once_and_not_after_it_expires() -> None:
    now = [1_000_000.0]
    auth = Auth(lambda: TOKEN, loopback_only=True, clock=lambda: now[0])
    first, late = auth.new_link(), auth.new_link()
    cookie = auth.redeem(first)
    assert cookie is not None and auth.allowed(_request("127.0.0.1", "localhost", cookie))
    assert auth.redeem(first) is None  # spent
    assert auth.redeem("not-a-link") is None
    now[0] += LINK_S + 1
    assert auth.redeem(late) is None  # expired
    links = [auth.new_link() for _ in range(40)]  # unopened ones do not pile up
    assert auth.redeem(links[0]) is None and auth.redeem(links[-1]) is not None


def test_wrong_tokens_are_rate_limited() -> None:
    auth = Auth(lambda: TOKEN, loopback_only=False, clock=lambda: 5000.0)
    for _ in range(10):
        assert auth.login("wrong") is None
    assert auth.login(TOKEN) is None  # locked for the minute, even for the right one


LAN = {"Host": "192.168.1.20:8642"}  # what a browser sends for http://192.168.1.20:8642/


async def _lan_login(
    http: aiohttp.ClientSession, base: str, extra: dict[str, str] | None = None
) -> tuple[aiohttp.ClientResponse, str]:
    headers = {**LAN, **(extra or {})}
    async with http.get(f"{base}/login", headers=headers) as form:
        page = await form.text()
    csrf = re.search(r'name="csrf" value="([0-9a-f]+)"', page)
    assert csrf is not None
    data = {"csrf": csrf.group(1), "token": TOKEN}
    async with http.post(
        f"{base}/login", data=data, headers=headers, allow_redirects=False
    ) as resp:
        return resp, page + await resp.text()


async def test_a_login_over_plain_http_to_a_lan_address_says_the_cookie_will_be_dropped(
    guarded: Any,
) -> None:
    gw, http, base = guarded
    resp, pages = await _lan_login(http, base)
    # the right token: no silent redirect back to the form, an answer that says why
    assert resp.status == 200
    assert 'id="insecure-cookie"' in pages and "The token was right" in pages
    assert "dashboard.insecure_cookie: true" in pages and "X-Forwarded-Proto" in pages
    assert resp.cookies[COOKIE]["secure"]
    # a trusted proxy's word is not taken unless the config says so
    resp, pages = await _lan_login(http, base, {"X-Forwarded-Proto": "https"})
    assert 'id="insecure-cookie"' in pages and resp.status == 200
    # on localhost the browser keeps it: straight in, no warning
    resp = await _login(http, base, TOKEN)
    assert resp.status == 303


@pytest.mark.parametrize("dashboard", [{"insecure_cookie": True}, {"trust_forwarded_proto": True}])
async def test_the_operator_can_make_a_lan_login_work(
    tmp_path: Path, fake_llm: FakeOpenAI, dashboard: dict[str, bool]
) -> None:
    config = make_config(
        tmp_path,
        fake_llm.base_url,
        control={"host": "0.0.0.0", "token": TOKEN},
        dashboard=dashboard,
    )
    async with running_gateway(config) as (gw, client):
        base = f"http://127.0.0.1:{gw.control.port}/dashboard"
        resp, pages = await _lan_login(client.http, base, {"X-Forwarded-Proto": "https"})
        assert resp.status == 303 and resp.headers["Location"] == "/dashboard/"
        assert 'id="insecure-cookie"' not in pages
        secure = bool(resp.cookies[COOKIE]["secure"])
        assert secure is not dashboard.get("insecure_cookie", False)


async def test_pages_name_an_inline_icon_so_the_browser_asks_for_no_favicon(
    guarded: Any,
) -> None:
    gw, http, base = guarded
    async with http.get(f"{base}/login") as resp:
        assert '<link rel="icon" href="data:,">' in await resp.text()
    resp = await _login(http, base, TOKEN)
    cookie = {"Cookie": f"{COOKIE}={resp.cookies[COOKIE].value}"}
    for path in PAGES:
        async with http.get(base + path, headers=cookie) as page:
            assert '<link rel="icon" href="data:,">' in await page.text(), path
