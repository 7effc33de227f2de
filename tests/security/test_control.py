"""The control API and pairing: loopback-only by default, the bearer token checked on every
route but health and readiness, a public address without a token refused at start (exit 78),
and pairing codes that cannot be brute-forced (five wrong approvals lock approvals)."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

from hermes_gateway.config import load_config
from hermes_gateway.errors import ConfigError
from hermes_gateway.platforms.pairing import CODE_ALPHABET, CODE_LENGTH, MAX_BAD_TRIES, MAX_PENDING
from tests.chaos.kit import ChaosTelegram, telegram_config
from tests.e2e.daemon import GatewayProcess
from tests.fakes.openai import FakeOpenAI
from tests.harness import eventually, make_config, running_gateway
from tests.security import keys

pytestmark = pytest.mark.filterwarnings("ignore::telegram.warnings.PTBDeprecationWarning")
BEARER = {"Authorization": f"Bearer {keys.CONTROL_TOKEN}"}


@pytest.mark.e2e
def test_the_control_api_listens_on_loopback_only_by_default(
    tmp_path: Path, llm: FakeOpenAI
) -> None:
    gw = GatewayProcess(tmp_path / "home", {"model": {"base_url": llm.base_url}})
    try:
        gw.start()
        assert gw.proc is not None
        listening = [
            c.laddr
            for c in psutil.Process(gw.proc.pid).net_connections("inet")
            if c.status == psutil.CONN_LISTEN
        ]
    finally:
        gw.kill()
    assert listening and all(addr.ip == "127.0.0.1" for addr in listening), listening


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "192.168.1.20", "gateway.example.com", ""])
def test_a_public_control_host_without_a_token_is_a_config_error(tmp_path: Path, host: str) -> None:
    path = tmp_path / "config.yaml"
    path.write_text(f"control:\n  host: {host!r}\n")
    with pytest.raises(ConfigError, match=r"^control\.token: "):
        load_config(path, {"HOME": str(tmp_path)})


@pytest.mark.parametrize("host", ["127.0.0.1", "127.8.9.10", "::1", "localhost"])
def test_a_loopback_control_host_needs_no_token(tmp_path: Path, host: str) -> None:
    path = tmp_path / "config.yaml"
    path.write_text(f"control:\n  host: {host!r}\n")
    assert load_config(path, {"HOME": str(tmp_path)}).control.host == host


def test_the_daemon_refuses_a_public_host_without_a_token_with_78(tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_text(f"home: {tmp_path}/home\ncontrol:\n  host: '::'\n")
    proc = subprocess.run(
        [sys.executable, "-m", "hermes_gateway", "gateway", "run", "--config", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 78
    assert "control.token" in proc.stderr and "Traceback" not in proc.stderr


ROUTES = [
    ("GET", "/status"),
    ("GET", "/metrics"),
    ("GET", "/pairing"),
    ("POST", "/pairing/approve"),
    ("POST", "/pairing/revoke"),
    ("GET", "/v1/models"),
    ("GET", "/v1/history?user=x"),
    ("POST", "/v1/chat/completions"),
]


async def test_every_route_but_health_checks_the_token(tmp_path: Path, llm: FakeOpenAI) -> None:
    config = make_config(tmp_path, llm.base_url, control={"port": 0, "token": keys.CONTROL_TOKEN})
    wrong = [
        {},
        {"Authorization": "Bearer nope"},
        {"Authorization": keys.CONTROL_TOKEN},  # no "Bearer "
        {"Authorization": f"Bearer {keys.CONTROL_TOKEN[:-1]}"},
        {"Authorization": f"bearer {keys.CONTROL_TOKEN}x"},
    ]
    async with running_gateway(config) as (gw, client):
        base = client.base
        http = client.http
        statuses: dict[tuple[str, str], set[int]] = {}
        for method, path in ROUTES:
            for headers in wrong:
                async with http.request(method, base + path, headers=headers, json={}) as resp:
                    statuses.setdefault((method, path), set()).add(resp.status)
        public = []
        for path in ("/healthz", "/readyz"):
            async with http.get(base + path) as resp:
                public.append(resp.status)
        async with http.get(base + "/status", headers=BEARER) as resp:
            with_token = resp.status
    assert all(codes == {401} for codes in statuses.values()), statuses
    assert public == [200, 200]
    assert with_token == 200


async def test_pairing_codes_cannot_be_brute_forced(
    tmp_path: Path, llm: FakeOpenAI, tg: ChaosTelegram, fast_telegram: None
) -> None:
    config = telegram_config(
        tmp_path,
        llm,
        tg,
        chats=(),
        control={"token": keys.CONTROL_TOKEN},
        telegram={"pairing": True},
    )
    async with running_gateway(config) as (gw, client):
        await eventually(lambda: gw.adapters["telegram"].health().ready)
        for user in range(901, 901 + MAX_PENDING + 2):
            tg.send_text(user, "hi, let me in")
        await eventually(lambda: len(tg.sent) == MAX_PENDING + 2)
        codes = [m["text"].split("approve telegram ")[1].split()[0] for m in tg.sent[:MAX_PENDING]]
        full = [m["text"] for m in tg.sent[MAX_PENDING:]]
        tries = []
        for guess in ["AAAAAAAA", "BBBBBBBB", "CCCCCCCC", "DDDDDDDD", "EEEEEEEE", codes[0]]:
            async with client.http.post(
                client.base + "/pairing/approve",
                json={"platform": "telegram", "code": guess},
                headers=BEARER,
            ) as resp:
                tries.append((resp.status, (await resp.json()).get("error", {}).get("message", "")))
        await asyncio.sleep(0.1)
    assert all(len(c) == CODE_LENGTH and set(c) <= set(CODE_ALPHABET) for c in codes)
    assert len(set(codes)) == MAX_PENDING
    assert all("Too many people are waiting" in text for text in full)
    assert [status for status, _ in tries] == [400] * (MAX_BAD_TRIES + 1)
    assert "locked" in tries[-1][1]  # even the right code is refused once locked
    assert llm.requests == []  # nobody unapproved reached the model
