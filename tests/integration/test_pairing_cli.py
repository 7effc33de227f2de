"""`hermes pairing list|approve|revoke` against a running gateway's control API."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

from tests.fakes.openai import FakeOpenAI
from tests.harness import make_config, running_gateway


async def hermes(*args: str) -> tuple[int, str, str]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "hermes_gateway",
        *args,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await proc.communicate()
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


async def test_pairing_round_trip_through_the_cli(tmp_path: Path, fake_llm: FakeOpenAI) -> None:
    config = make_config(tmp_path, fake_llm.base_url, control={"token": "ctl-token-123"})
    cfg_path = str(tmp_path / "config.yaml")
    async with running_gateway(config) as (gw, client):
        url = client.base
        request = await gw.pairing.request("telegram", "4242", "carol", "4242")
        assert request is not None
        code, listing, _ = await hermes("pairing", "--config", cfg_path, "--url", url, "list")
        assert code == 0 and request.code in listing and "carol" in listing
        code, _, err = await hermes(
            "pairing", "--config", cfg_path, "--url", url, "approve", "telegram", "NOPE1234"
        )
        assert code == 1 and "no pending pairing request" in err
        code, out, _ = await hermes(
            "pairing", "--config", cfg_path, "--url", url, "approve", "telegram", request.code
        )
        assert code == 0 and "approved telegram user 4242 (carol)" in out
        assert gw.gate.policy("telegram").pairing is None  # pairing is off in this config ...
        assert gw.pairing.is_approved("telegram", "4242")  # ... but the book still records it
        code, out, _ = await hermes(
            "pairing", "--config", cfg_path, "--url", url, "revoke", "telegram", "4242"
        )
        assert code == 0 and not gw.pairing.is_approved("telegram", "4242")
        status, _ = await client.get("/pairing")  # the token guards the operator routes
    assert status == 401


async def test_the_cli_needs_only_the_gateways_token_file(
    tmp_path: Path, fake_llm: FakeOpenAI
) -> None:
    """No control.token configured: the operator's commands send the token the gateway wrote
    in its home; from a home without it they are refused, and say where the token is."""
    config = make_config(tmp_path, fake_llm.base_url)
    cfg = str(tmp_path / "config.yaml")
    elsewhere = tmp_path / "other"
    elsewhere.mkdir()
    make_config(elsewhere, None)  # another home: no token file there
    other_cfg = str(elsewhere / "config.yaml")
    async with running_gateway(config) as (gw, client):
        url = client.base
        request = await gw.pairing.request("telegram", "4242", "carol", "4242")
        assert request is not None
        code, out, err = await hermes("pairing", "--config", other_cfg, "--url", url, "list")
        assert code == 1 and "missing or wrong bearer token" in err and "control.token" in err
        code, _, _ = await hermes(
            "pairing", "--config", other_cfg, "--url", url, "approve", "telegram", request.code
        )
        assert code == 1 and not gw.pairing.is_approved("telegram", "4242")

        code, listing, _ = await hermes("pairing", "--config", cfg, "--url", url, "list")
        assert code == 0 and request.code in listing
        code, out, _ = await hermes(
            "pairing", "--config", cfg, "--url", url, "approve", "telegram", request.code
        )
        assert code == 0 and gw.pairing.is_approved("telegram", "4242")
        code, out, _ = await hermes("inbox", "--config", cfg, "--url", url, "list")
        assert code == 0 and "no quarantined messages" in out
        code, out, _ = await hermes("gateway", "status", "--config", cfg, "--url", url)
        assert code == 0 and "ready" in out
        code, out, _ = await hermes("gateway", "status", "--config", other_cfg, "--url", url)
        assert code == 1 and "HTTP 401" in out and "control.token" in out
