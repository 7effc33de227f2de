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
