"""Operator commands against a live gateway and the fakes: status, doctor, SIGHUP reload."""

from __future__ import annotations

import asyncio
import logging
import sys
from pathlib import Path

import yaml

from tests.fakes.openai import FakeOpenAI
from tests.fakes.telegram import FakeTelegram
from tests.harness import make_config, running_gateway


async def hermes(*args: str, env: dict[str, str] | None = None) -> tuple[int, str, str]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "hermes_gateway",
        *args,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=env,
    )
    out, err = await proc.communicate()
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


async def test_status_reports_a_ready_gateway_and_a_down_one(
    tmp_path: Path, fake_llm: FakeOpenAI
) -> None:
    config = make_config(tmp_path, fake_llm.base_url, runner={"workers": 8})
    cfg = str(tmp_path / "config.yaml")
    async with running_gateway(config) as (gw, client):
        await client.chat("warm up")
        code, out, _ = await hermes("gateway", "status", "--config", cfg, "--url", client.base)
        url = client.base
    assert code == 0, out
    assert "ready" in out and "api        connected" in out
    assert "workers      0/8 busy" in out
    code, out, _ = await hermes("gateway", "status", "--config", cfg, "--url", url)
    assert code == 3 and "down" in out


async def test_doctor_passes_against_healthy_fakes(tmp_path: Path, fake_llm: FakeOpenAI) -> None:
    with FakeTelegram(token="123:ABCDEF") as tg:
        make_config(
            tmp_path,
            fake_llm.base_url,
            platforms={
                "telegram": {
                    "enabled": True,
                    "token": "123:ABCDEF",
                    "base_url": tg.api_url,
                    "base_file_url": tg.file_url,
                }
            },
            tools={"enabled": ["read_file", "hindsight_recall"]},
        )
        code, out, _ = await hermes("doctor", "--config", str(tmp_path / "config.yaml"))
    assert code == 0, out
    assert "telegram" in out and "token valid: @hermes_bot" in out
    assert "model" in out and "gpt-4o-mini at" in out
    [embeddings] = [line for line in out.splitlines() if line.startswith("embeddings")]
    assert " ok " in embeddings and f"text-embedding-3-small at {fake_llm.base_url}" in embeddings
    assert fake_llm.embedding_inputs == [["hermes doctor"]]  # a real call
    assert "discord" in out and "skip" in out
    # which bound holds a script's memory, all its processes together
    [memory] = [line for line in out.splitlines() if line.startswith("tool memory")]
    assert "cgroup" in memory and ("all its processes together" in memory or "summed" in memory)


async def test_doctor_names_what_is_broken(tmp_path: Path, fake_llm: FakeOpenAI) -> None:
    with FakeTelegram(token="123:ABCDEF") as tg:
        config = make_config(
            tmp_path,
            fake_llm.base_url,
            model={"api_key": "sk-wrong"},
            platforms={
                "telegram": {
                    "enabled": True,
                    "token": "999:WRONG",
                    "base_url": tg.api_url,
                    "base_file_url": tg.file_url,
                }
            },
        )
        code, out, _ = await hermes("doctor", "--config", str(tmp_path / "config.yaml"))
    assert code == 1
    rows = {line.split()[0]: line for line in out.splitlines() if line.strip()}
    assert "FAIL" in rows["model"] and "rejected the API key" in rows["model"]
    assert "FAIL" in rows["telegram"] and "token rejected" in rows["telegram"]
    # a check creates nothing: the database is made by the first start, not by the doctor
    assert "no database yet" in rows["store"]
    assert not (Path(config.home) / "state.db").exists()


async def test_doctor_names_the_embeddings_keys_when_that_endpoint_fails(
    tmp_path: Path, fake_llm: FakeOpenAI
) -> None:
    make_config(
        tmp_path,
        fake_llm.base_url,
        tools={"enabled": ["hindsight_retain", "hindsight_recall"]},
        memory={"embeddings": {"base_url": f"{fake_llm.base_url}/nowhere", "api_key": "sk-fake"}},
    )
    code, out, _ = await hermes("doctor", "--config", str(tmp_path / "config.yaml"))
    assert code == 1, out
    rows = {line.split()[0]: line for line in out.splitlines() if line.strip()}
    assert "ok" in rows["model"]  # the chat endpoint is fine: only the embeddings one fails
    assert "FAIL" in rows["embeddings"] and "HTTP 404" in rows["embeddings"]
    assert "memory.embeddings.base_url" in rows["embeddings"]
    make_config(tmp_path, fake_llm.base_url)  # no hindsight_* tool: the check is skipped
    code, out, _ = await hermes("doctor", "--config", str(tmp_path / "config.yaml"))
    rows = {line.split()[0]: line for line in out.splitlines() if line.strip()}
    assert rows["embeddings"].split()[1] == "skip"


async def test_sighup_reload_changes_access_and_level_keeps_sessions(
    tmp_path: Path, fake_llm: FakeOpenAI
) -> None:
    config = make_config(
        tmp_path, fake_llm.base_url, platforms={"telegram": {"allowed_users": ["1"]}}
    )
    path = tmp_path / "config.yaml"
    async with running_gateway(config) as (gw, client):
        gw.config_path = str(path)
        await client.chat("remember me")
        policy = gw.gate.policy("telegram")
        assert policy.is_allowed_user("1") and not policy.is_allowed_user("2")
        data = yaml.safe_load(path.read_text())
        data["platforms"]["telegram"]["allowed_users"] = ["2"]
        data["logging"]["level"] = "debug"
        path.write_text(yaml.safe_dump(data))
        await gw.reload()
        assert policy.is_allowed_user("2") and not policy.is_allowed_user("1")
        assert logging.getLogger().level == logging.DEBUG
        path.write_text("runner: {busy_policy: never}\n")  # a broken edit is refused
        await gw.reload()
        assert policy.is_allowed_user("2")
        history = await client.history()
    logging.getLogger().setLevel(logging.WARNING)
    assert [m["content"] for m in history] == ["remember me", "echo: remember me"]


async def test_doctor_checks_the_traces_collector_when_traces_are_on(
    tmp_path: Path, fake_llm: FakeOpenAI
) -> None:
    from tests.e2e.daemon import free_port
    from tests.fakes.otlp import Receiver

    receiver = Receiver()
    receiver.start()
    try:
        for endpoint in (receiver.endpoint, f"http://127.0.0.1:{free_port()}/v1/traces"):
            traces = {"enabled": True, "endpoint": endpoint, "headers": {"x-key": "hdr-secret"}}
            make_config(tmp_path, fake_llm.base_url, observability={"traces": traces})
            code, out, _ = await hermes("doctor", "--config", str(tmp_path / "config.yaml"))
            rows = {line.split()[0]: line for line in out.splitlines() if line.strip()}
            assert "hdr-secret" not in out
            if endpoint == receiver.endpoint:
                assert " ok " in rows["traces"] and "reachable (HTTP 200)" in rows["traces"]
                assert receiver.headers[-1]["x-key"] == "hdr-secret"  # a real export
            else:
                assert code == 1 and "FAIL" in rows["traces"] and "unreachable" in rows["traces"]
    finally:
        receiver.stop()
    make_config(tmp_path, fake_llm.base_url)
    _code, out, _ = await hermes("doctor", "--config", str(tmp_path / "config.yaml"))
    rows = {line.split()[0]: line for line in out.splitlines() if line.strip()}
    assert "skip" in rows["traces"] and "traces are off" in rows["traces"]
