"""systemd units: rendered correctly, accepted by systemd-analyze, installed by the CLI."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from hermes_gateway.cli.systemd import (
    SELFCHECK_SERVICE,
    SELFCHECK_TIMER,
    SERVICE,
    ServiceManager,
    UnitParams,
    render_selfcheck,
    render_service,
)
from hermes_gateway.config import load_config

ROOT = Path(__file__).resolve().parents[3]
EXAMPLE = UnitParams(
    python="/opt/hermes/venv/bin/python",
    config="/etc/hermes/config.yaml",
    home="/var/lib/hermes",
    workspace="/var/lib/hermes/workspace",
    env_file="/etc/hermes/gateway.env",
    user="hermes",
    drain_timeout_s=8,
    watchdog_fatal_s=60,
)


def params(tmp_path: Path) -> UnitParams:
    config = load_config(None, {"HOME": str(tmp_path), "HERMES_HOME": str(tmp_path / "h")})
    return UnitParams.from_config(config, str(tmp_path / "config.yaml"))


@pytest.mark.parametrize("user_unit", [False, True])
def test_rendered_units_pass_systemd_analyze_verify(tmp_path: Path, user_unit: bool) -> None:
    assert shutil.which("systemd-analyze"), "systemd-analyze is needed (apt-get install systemd)"
    p = params(tmp_path)
    check, timer = render_selfcheck(p, user_unit=user_unit)
    files = {
        SERVICE: render_service(p, user_unit=user_unit),
        SELFCHECK_SERVICE: check,
        SELFCHECK_TIMER: timer,
    }
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    # --user loads the units as a user manager would; it only needs a runtime directory
    runtime = tmp_path / "runtime"
    runtime.mkdir(mode=0o700)
    mode = ["--user"] if user_unit else []
    cmd = ["systemd-analyze", "verify", *mode, "--man=no", *(str(tmp_path / n) for n in files)]
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "XDG_RUNTIME_DIR": str(runtime)}
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False, env=env)
    # verify also reports "ignoring" problems on stderr with exit 0: both must be clean
    noise = [line for line in proc.stderr.splitlines() if "hermes-gateway" in line]
    assert proc.returncode == 0 and noise == [], proc.stderr


def test_unit_restarts_on_75_never_on_78_and_outlasts_the_drain() -> None:
    unit = render_service(EXAMPLE, user_unit=False)
    lines = set(unit.splitlines())
    assert {
        "Type=notify",
        "Restart=always",
        "RestartForceExitStatus=75",
        "RestartPreventExitStatus=78",
        "User=hermes",
        "ProtectSystem=strict",
        "NoNewPrivileges=yes",
        "PrivateTmp=yes",
        "EnvironmentFile=-/etc/hermes/gateway.env",
        "ReadWritePaths=/var/lib/hermes /var/lib/hermes/workspace",
    } <= lines
    stop = int(next(x for x in lines if x.startswith("TimeoutStopSec=")).split("=")[1])
    dog = int(next(x for x in lines if x.startswith("WatchdogSec=")).split("=")[1])
    assert stop > EXAMPLE.drain_timeout_s + 5
    assert dog > EXAMPLE.watchdog_fatal_s  # our own watchdog (with the stack) fires first


@pytest.mark.parametrize(
    ("name", "user_unit"),
    [("hermes-gateway.service", False), ("hermes-gateway-user.service", True)],
)
def test_example_units_in_deploy_are_current(name: str, user_unit: bool) -> None:
    assert (ROOT / "deploy/systemd" / name).read_text() == render_service(
        EXAMPLE, user_unit=user_unit
    )


def test_the_user_unit_is_sandboxed_as_far_as_a_user_manager_allows() -> None:
    unit = render_service(EXAMPLE, user_unit=True)
    lines = unit.splitlines()
    assert "network-online.target" not in unit  # a user manager has no such target
    assert {
        "NoNewPrivileges=yes",
        # a user manager sets up the file-system protections only inside a user namespace
        "PrivateUsers=yes",
        "ProtectSystem=strict",
        "ProtectHome=read-only",
        "ReadWritePaths=/var/lib/hermes /var/lib/hermes/workspace",
        "PrivateTmp=yes",
        "PrivateDevices=yes",
        "ProtectKernelTunables=yes",
        "ProtectKernelModules=yes",
        "RestrictSUIDSGID=yes",
        "LockPersonality=yes",
        "SystemCallArchitectures=native",
    } <= set(lines)
    # the gateway makes namespaces and cgroups for its tools: nothing may forbid that
    for unit_text in (unit, render_service(EXAMPLE, user_unit=False)):
        assert "RestrictNamespaces" not in unit_text and "SystemCallFilter" not in unit_text
    assert "network-online.target" in render_service(EXAMPLE, user_unit=False)


def test_example_selfcheck_units_are_current() -> None:
    check, timer = render_selfcheck(EXAMPLE, user_unit=False)
    assert (ROOT / "deploy/systemd" / SELFCHECK_SERVICE).read_text() == check
    assert (ROOT / "deploy/systemd" / SELFCHECK_TIMER).read_text() == timer


def test_install_writes_units_and_enables_with_linger(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    ran: list[list[str]] = []
    manager = ServiceManager(
        params(tmp_path), user_unit=True, run=lambda c: ran.append(list(c)) or 0, out=lambda s: None
    )
    assert manager.install() == 0
    unit_dir = tmp_path / ".config/systemd/user"
    assert (unit_dir / SERVICE).read_text().startswith("[Unit]")
    assert (unit_dir / SELFCHECK_TIMER).exists()
    env_file = Path(manager.params.env_file)
    assert env_file.exists() and env_file.stat().st_mode & 0o077 == 0
    assert ran == [
        ["systemctl", "--user", "daemon-reload"],
        ["systemctl", "--user", "enable", "--now", SERVICE],
        ["systemctl", "--user", "enable", "--now", SELFCHECK_TIMER],
        ["loginctl", "enable-linger", manager.params.user],
    ]
    ran.clear()
    assert manager.uninstall() == 0
    assert not (unit_dir / SERVICE).exists()
    assert ran[-1] == ["systemctl", "--user", "daemon-reload"]


def test_install_dry_run_prints_everything_and_changes_nothing(tmp_path: Path) -> None:
    config = tmp_path / "config.yaml"
    config.write_text(f"home: {tmp_path}/home\n")
    env = {"HOME": str(tmp_path), "PATH": "/usr/bin:/bin"}
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "hermes_gateway",
            "gateway",
            "install",
            "--user",
            "--dry-run",
            "--config",
            str(config),
        ],
        capture_output=True,
        text=True,
        timeout=30,
        env=env,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert f"--config {config}" in out and "RestartPreventExitStatus=78" in out
    assert "systemctl --user enable --now hermes-gateway.service" in out
    assert "loginctl enable-linger" in out
    assert not (tmp_path / ".config").exists()


def test_install_refuses_a_bad_config(tmp_path: Path) -> None:
    config = tmp_path / "config.yaml"
    config.write_text("runner:\n  workers: zero\n")
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "hermes_gateway",
            "gateway",
            "install",
            "--dry-run",
            "--config",
            str(config),
        ],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert proc.returncode == 78 and "runner.workers" in proc.stderr
