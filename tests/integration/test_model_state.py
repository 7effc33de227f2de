"""The model endpoint's last known state, from the gateway's own calls: /readyz names a failing
model among its reasons (still ready: messages are answered with the error), /status and
`hermes gateway status` show it, and a successful call clears it."""

from __future__ import annotations

import socket
from pathlib import Path

from tests.fakes.openai import FakeOpenAI, error
from tests.harness import make_config, running_gateway
from tests.integration.test_ops import hermes


async def test_a_failing_model_shows_in_readyz_status_and_gateway_status(
    tmp_path: Path, fake_llm: FakeOpenAI
) -> None:
    fake_llm.push(error(500))
    cfg = str(tmp_path / "config.yaml")
    async with running_gateway(make_config(tmp_path, fake_llm.base_url)) as (_gw, client):
        _, before = await client.get("/status", operator=True)
        failed = await client.chat("hello")
        ready_code, ready = await client.get("/readyz")
        _, status = await client.get("/status", operator=True)
        code, out, _ = await hermes("gateway", "status", "--config", cfg, "--url", client.base)
        answered = await client.chat("hello again")  # the fake echoes now
        _, ready_after = await client.get("/readyz")
        _, status_after = await client.get("/status", operator=True)
        _, out_after, _ = await hermes("gateway", "status", "--config", cfg, "--url", client.base)
    assert before["model"]["state"] == "unknown"
    assert failed["status"] == 502
    # still ready (it answers, with the error), but the reasons say why answers fail
    assert ready_code == 200 and ready["ready"] is True
    assert [r for r in ready["reasons"] if r.startswith("model: the last call failed")], ready
    assert "http_500" in " ".join(ready["reasons"])
    assert status["model"]["state"] == "failing"
    assert status["model"]["error"]["kind"] == "http_500"
    assert code == 0 and "FAILING" in out and "http_500" in out, out
    # a call that works clears it everywhere
    assert answered["text"] == "echo: hello again"
    assert not [r for r in ready_after["reasons"] if r.startswith("model:")]
    assert status_after["model"]["state"] == "ok" and "error" not in status_after["model"]
    assert "FAILING" not in out_after and "ok (the last call" in out_after


async def test_an_unreachable_endpoint_is_named_as_such(tmp_path: Path) -> None:
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    config = make_config(tmp_path, f"http://127.0.0.1:{port}/v1")
    async with running_gateway(config) as (_gw, client):
        failed = await client.chat("hello")
        _, ready = await client.get("/readyz")
        _, status = await client.get("/status", operator=True)
    assert failed["status"] == 502
    assert "unreachable" in " ".join(ready["reasons"]), ready
    assert status["model"]["state"] == "failing"
    assert status["model"]["error"]["kind"] == "unreachable"
