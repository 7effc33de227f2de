"""Hostile configs and a taken port: each is refused with exit 78 naming the key, quickly and
in bounded memory, never with a traceback or a restart loop."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import pytest

from hermes_gateway.config import MAX_CONFIG_BYTES, load_config
from hermes_gateway.errors import ConfigError
from tools.ssrf import SsrfGuard


def _load(tmp_path: Path, text: str, env: dict[str, str] | None = None) -> None:
    path = tmp_path / "config.yaml"
    path.write_text(text)
    load_config(path, {"HOME": str(tmp_path), **(env or {})})


def _run(tmp_path: Path, config: str) -> subprocess.CompletedProcess[str]:
    path = tmp_path / "config.yaml"
    path.write_text(f"home: {tmp_path}/home\n{config}")
    return subprocess.run(
        [sys.executable, "-m", "hermes_gateway", "gateway", "run", "--config", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_a_duplicate_key_is_refused_naming_it_and_both_lines(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as info:
        _load(tmp_path, "model:\n  name: a\n  timeout_s: 5\n  name: b\n")
    assert info.value.key == "name"
    assert "lines 2 and 4" in info.value.reason


def test_a_merge_key_may_still_be_overridden(tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_text("model:\n  <<: {name: a, timeout_s: 5}\n  name: b\n")
    assert load_config(path, {"HOME": str(tmp_path)}).model.name == "b"


def test_an_oversized_config_is_refused_without_being_parsed(tmp_path: Path) -> None:
    # a valid YAML file (all comments) just over the cap: parsed, it would load as {}
    line = "#" + "x" * 1023 + "\n"
    with pytest.raises(ConfigError, match="larger than"):
        _load(tmp_path, line * (MAX_CONFIG_BYTES // len(line) + 1))


def test_a_device_as_config_is_refused_after_a_bounded_read() -> None:
    with pytest.raises(ConfigError, match="larger than"):
        load_config("/dev/zero", {"HOME": "/nonexistent"})


def test_a_huge_system_prompt_from_the_environment_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as info:
        _load(tmp_path, "model:\n  system_prompt: ${BIG}\n", {"BIG": "x" * 5_000_000})
    assert info.value.key == "model.system_prompt"


@pytest.mark.parametrize(
    "token", ["' '", "a", "aaaaaaaaaaaaaaaaaaaaaaaa", "' padded-0123456789abcdef '"]
)
def test_a_weak_token_on_a_public_host_is_refused(tmp_path: Path, token: str) -> None:
    with pytest.raises(ConfigError) as info:
        _load(tmp_path, f"control:\n  host: 0.0.0.0\n  token: {token}\n")
    assert info.value.key == "control.token"


@pytest.mark.parametrize("url", ["mysql://u:p@db/hermes", "postgresql://db/hermes", "nonsense"])
def test_an_unsupported_store_url_is_refused(tmp_path: Path, url: str) -> None:
    with pytest.raises(ConfigError) as info:
        _load(tmp_path, f"store:\n  url: '{url}'\n")
    assert info.value.key == "store.url"


def test_the_daemon_exits_78_on_a_mysql_store_url(tmp_path: Path) -> None:
    proc = _run(tmp_path, "store:\n  url: mysql://u:p@127.0.0.1/hermes\n")
    assert proc.returncode == 78, proc.stderr
    assert "store.url" in proc.stderr and "Traceback" not in proc.stderr


def test_the_daemon_exits_78_naming_a_port_that_is_taken(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        proc = _run(tmp_path, f"control:\n  port: {port}\n")
    assert proc.returncode == 78, proc.stderr
    assert "control.port" in proc.stderr and f"127.0.0.1:{port}" in proc.stderr
    assert "Traceback" not in proc.stderr
    log = (tmp_path / "home" / "logs" / "gateway.log").read_text()
    assert '"gateway.start_failed"' in log and f"127.0.0.1:{port}" in log
    assert '"gateway.stopped"' not in log  # a failed start is not a clean stop


@pytest.mark.parametrize(
    "address",
    [
        "64:ff9b::a00:1",  # NAT64 well-known prefix carrying 10.0.0.1
        "64:ff9b::7f00:1",  # ... carrying 127.0.0.1
        "64:ff9b:1::a00:1",  # NAT64 local-use prefix
        "2002:a00:1::1",  # 6to4 of 10.0.0.1
        "::a00:1",  # IPv4-compatible 10.0.0.1
    ],
)
def test_the_ssrf_guard_sees_through_ipv6_translation(address: str) -> None:
    assert not SsrfGuard().address_allowed(address)


def test_the_ssrf_guard_still_allows_public_translated_addresses() -> None:
    assert SsrfGuard().address_allowed("64:ff9b::808:808")  # 8.8.8.8 through NAT64
