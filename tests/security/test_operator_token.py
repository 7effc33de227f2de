"""Operator routes never trust loopback: with no `control.token` configured the gateway makes
one (`<home>/control.token`, mode 0600, reused at every start), and pairing, the inbox, jobs,
`/status` and the dashboard refuse a local process without it, as a tool's `curl` would be;
the chat API, health and metrics stay open on loopback as before."""

from __future__ import annotations

import re
import stat
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from structlog.testing import capture_logs

from hermes_gateway.config import Config
from hermes_gateway.control.token import token_path
from hermes_gateway.server import Gateway
from tests.fakes.openai import FakeOpenAI
from tests.harness import Client, make_config, operator_headers, running_gateway

OPERATOR = [
    ("GET", "/pairing"),
    ("POST", "/pairing/approve"),
    ("POST", "/pairing/revoke"),
    ("GET", "/status"),
    ("GET", "/inbox"),
    ("POST", "/inbox/1/retry"),
    ("POST", "/inbox/1/drop"),
    ("POST", "/memory/forget"),
    ("GET", "/v1/cron/jobs"),
    ("POST", "/v1/cron/jobs"),
    ("GET", "/v1/cron/jobs/j1"),
    ("DELETE", "/v1/cron/jobs/j1"),
    ("GET", "/v1/cron/jobs/j1/runs"),
    ("POST", "/v1/cron/jobs/j1/run"),
    ("POST", "/dashboard-link"),
]
NO_TOKEN = [{}, {"Authorization": "Bearer "}, {"Authorization": "Bearer guess"}]


def _config(tmp_path: Path, llm: FakeOpenAI) -> Config:
    return make_config(tmp_path, llm.base_url, scheduler={"enabled": True})


@pytest.fixture
async def pending(
    tmp_path: Path, fake_llm: FakeOpenAI
) -> AsyncIterator[tuple[Gateway, Client, str]]:
    """A gateway with no control.token configured and a stranger's pairing code waiting."""
    async with running_gateway(_config(tmp_path, fake_llm)) as (gw, client):
        request = await gw.pairing.request("telegram", "4242", "mallory", "4242")
        assert request is not None
        yield gw, client, request.code


async def _status(http: aiohttp.ClientSession, method: str, url: str, **kw: Any) -> int:
    async with http.request(method, url, allow_redirects=False, **kw) as resp:
        await resp.read()
        return resp.status


async def test_a_local_process_without_the_token_approves_nobody(pending: Any) -> None:
    """What a tool's script tried: list the codes, approve one, read /status and /inbox,
    scrape the dashboard's CSRF token and post its actions. All refused; nobody approved."""
    gw, client, code = pending
    http, base = client.http, client.base
    refused = {
        (method, path): {await _status(http, method, base + path, headers=h) for h in NO_TOKEN}
        for method, path in OPERATOR
    }
    assert all(codes == {401} for codes in refused.values()), refused
    approve = {"platform": "telegram", "code": code}
    assert await _status(http, "POST", f"{base}/pairing/approve", json=approve) == 401

    dash = f"{base}/dashboard"
    for page in ("/", "/pairing", "/inbox", "/sessions", "/logs", "/chat"):
        async with http.get(dash + page, allow_redirects=False) as resp:
            assert (resp.status, resp.headers["Location"]) == (303, "/dashboard/login"), page
    assert await _status(http, "GET", f"{dash}/events/pairing") == 401
    async with http.get(f"{dash}/login") as form:  # the only page it shows: the login form
        csrf = re.search(r'name="csrf" value="([0-9a-f]+)"', await form.text())
    assert csrf is not None
    headers = {"X-CSRF-Token": csrf.group(1)}
    actions = [
        ("/api/pairing/approve", approve),
        ("/api/pairing/revoke", {"platform": "telegram", "user_id": "4242"}),
        ("/api/inbox/1/retry", {}),
        ("/api/sessions/stop", {"key": "api:dm:x"}),
        ("/api/chat", {"text": "hi"}),
        ("/api/jobs/j1/run", {}),
    ]
    for action, body in actions:
        assert await _status(http, "POST", dash + action, json=body, headers=headers) == 401
    login = {"csrf": csrf.group(1), "token": "guess"}
    assert await _status(http, "POST", f"{dash}/login", data=login) == 401
    async with http.get(f"{dash}/login?once=guess") as resp:
        assert resp.status == 401 and "hermes_dashboard" not in resp.cookies

    assert not gw.pairing.is_approved("telegram", "4242")
    entries = await gw.pairing.entries()
    assert [(e["user_id"], e["status"]) for e in entries] == [("4242", "pending")]


async def test_the_chat_api_health_and_metrics_stay_open_on_loopback(
    pending: Any, fake_llm: FakeOpenAI
) -> None:
    gw, client, _code = pending
    http, base = client.http, client.base
    answer = await client.chat("hello without a token")
    assert answer["status"] == 200 and answer["text"] == "echo: hello without a token"
    for path in ("/v1/models", "/v1/history?user=alice", "/healthz", "/readyz", "/metrics"):
        assert await _status(http, "GET", base + path) == 200, path
    assert await _status(http, "GET", f"{base}/nowhere") == 404  # not a 401: nothing there
    # while the operator routes right beside them want the token
    assert await _status(http, "GET", f"{base}/status") == 401


async def test_the_generated_token_opens_every_operator_route(pending: Any) -> None:
    gw, client, code = pending
    http, base, op = client.http, client.base, client.operator
    async with http.get(f"{base}/pairing", headers=op) as resp:
        assert resp.status == 200
        assert [e["code"] for e in (await resp.json())["entries"]] == [code]
    approve = {"platform": "telegram", "code": code}
    assert await _status(http, "POST", f"{base}/pairing/approve", json=approve, headers=op) == 200
    assert gw.pairing.is_approved("telegram", "4242")
    for path in ("/status", "/inbox", "/v1/cron/jobs"):
        assert await _status(http, "GET", base + path, headers=op) == 200, path
    assert await _status(http, "POST", f"{base}/v1/cron/jobs/j1/run", headers=op) == 404
    await client.dashboard_login()  # the dashboard, through a link the token bought
    async with http.get(f"{base}/dashboard/pairing", allow_redirects=False) as resp:
        assert resp.status == 200 and "Pairing" in await resp.text()


async def test_the_token_file_is_owner_only_and_reused_across_restarts(
    tmp_path: Path, fake_llm: FakeOpenAI
) -> None:
    config = _config(tmp_path, fake_llm)
    path = token_path(config.home_path)
    with capture_logs() as logs:
        async with running_gateway(config) as (gw, client):
            token = path.read_text().strip()
            mode = stat.S_IMODE(path.stat().st_mode)
            shown = str(await client.get("/status", operator=True))
    assert mode == 0o600 and len(token) >= 32
    assert client.operator == {"Authorization": f"Bearer {token}"}
    assert [e["path"] for e in logs if e["event"] == "control.token_created"] == [str(path)]
    assert token not in str(logs) and token not in shown
    assert [p.name for p in config.home_path.iterdir() if "token" in p.name] == [
        "control.token"  # no temporary file left beside it
    ]
    async with running_gateway(config) as (gw, client):
        assert path.read_text().strip() == token  # the same token: a restart changes nothing
        assert client.operator == {"Authorization": f"Bearer {token}"}
        assert (await client.get("/status", operator=True))[0] == 200
    path.chmod(0o644)  # someone opened it up: the next start closes it again
    async with running_gateway(config) as (gw, client):
        assert path.read_text().strip() == token
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
        assert await _status(client.http, "GET", f"{client.base}/status") == 401
        assert (await client.get("/status", operator=True))[0] == 200


async def test_a_configured_token_is_used_as_before_and_buys_a_login_link(
    tmp_path: Path, fake_llm: FakeOpenAI
) -> None:
    configured = "configured-token-0123456789abcdef"
    config = make_config(tmp_path, fake_llm.base_url, control={"token": configured})
    async with running_gateway(config) as (gw, client):
        assert operator_headers(config) == {"Authorization": f"Bearer {configured}"}
        assert await _status(client.http, "GET", f"{client.base}/status") == 401
        status, _ = await client.get("/status", operator=True)
        assert status == 200
        chat = await client.chat("hi")  # the chat API wants it too, as before
        assert chat["status"] == 401
        await client.dashboard_login()  # and it buys the dashboard's one-time link
        async with client.http.get(f"{client.base}/dashboard/", allow_redirects=False) as resp:
            assert resp.status == 200
    assert not token_path(config.home_path).exists()
