"""systemd integration: render the unit files and install, remove or drive the service.

The units restart the gateway when it asks (exit 75) or dies, never when the config is bad
(exit 78), feed systemd's watchdog, and outlast the drain on stop.
"""

from __future__ import annotations

import getpass
import os
import shlex
import shutil
import subprocess
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from hermes_gateway.config import Config
from hermes_gateway.platform_spec import platform_specs

SERVICE = "hermes-gateway.service"
SELFCHECK_SERVICE = "hermes-gateway-selfcheck.service"
SELFCHECK_TIMER = "hermes-gateway-selfcheck.timer"

_HARDENING = """\
NoNewPrivileges=yes
ProtectSystem=strict
ProtectHome=read-only
ReadWritePaths={rw_paths}
PrivateTmp=yes
PrivateDevices=yes
ProtectKernelTunables=yes
ProtectKernelModules=yes
ProtectControlGroups=yes
RestrictSUIDSGID=yes
RestrictRealtime=yes
LockPersonality=yes
SystemCallArchitectures=native
"""

# What a user manager can enforce: the file-system and kernel protections need a user namespace
# there (PrivateUsers=yes, which maps only the user's own ids; see systemd.exec(5)), and
# ProtectControlGroups is for system units only. Nothing here, nor in _HARDENING, forbids what
# the gateway does itself for its tools: it makes user, mount and network namespaces
# (tools/sandbox.py) and per-call cgroups (tools/memory_group.py), so no RestrictNamespaces and
# no SystemCallFilter that would block unshare, mount or setns.
_USER_HARDENING = """\
NoNewPrivileges=yes
PrivateUsers=yes
ProtectSystem=strict
ProtectHome=read-only
ReadWritePaths={rw_paths}
PrivateTmp=yes
PrivateDevices=yes
ProtectKernelTunables=yes
ProtectKernelModules=yes
ProtectKernelLogs=yes
RestrictSUIDSGID=yes
RestrictRealtime=yes
LockPersonality=yes
SystemCallArchitectures=native
"""


@dataclass(frozen=True, slots=True)
class UnitParams:
    python: str
    config: str
    home: str
    workspace: str
    env_file: str
    user: str
    drain_timeout_s: float
    watchdog_fatal_s: float

    @classmethod
    def from_config(cls, config: Config, config_path: str, user: str | None = None) -> UnitParams:
        return cls(
            python=sys.executable,
            config=str(Path(config_path).absolute()),
            home=config.home,
            workspace=str(config.workspace_path),
            env_file=str(config.home_path / "gateway.env"),
            user=user or getpass.getuser(),
            drain_timeout_s=config.runner.drain_timeout_s,
            watchdog_fatal_s=config.watchdog.fatal_s,
        )

    @property
    def timeout_stop_s(self) -> int:
        # the drain, then the interrupt and the store flush, with room to spare
        return int(self.drain_timeout_s + 20)

    @property
    def watchdog_sec(self) -> int:
        # our own watchdog exits 75 (with the stuck stack logged) after fatal_s; systemd's is
        # the backstop for a process too wedged even for that thread
        return int(self.watchdog_fatal_s * 1.5 + 10)


def render_service(p: UnitParams, *, user_unit: bool) -> str:
    exec_start = " ".join(
        shlex.quote(a)
        for a in (p.python, "-m", "hermes_gateway", "gateway", "run", "--config", p.config)
    )
    # a user manager has no network-online.target: naming it there orders nothing
    network = [] if user_unit else ["After=network-online.target", "Wants=network-online.target"]
    lines = [
        "[Unit]",
        "Description=Hermes Gateway (chat gateway for an AI agent)",
        *network,
        # a crash loop of a broken release stops here instead of spinning forever
        "StartLimitIntervalSec=300",
        "StartLimitBurst=10",
        "",
        "[Service]",
        "Type=notify",
        "NotifyAccess=main",
        f"ExecStart={exec_start}",
        "ExecReload=/bin/kill -HUP $MAINPID",
        f"Environment=HERMES_HOME={p.home}",
        "Environment=PYTHONUNBUFFERED=1",
        f"EnvironmentFile=-{p.env_file}",
        f"WorkingDirectory={p.home}",
        "Restart=always",
        "RestartSec=2",
        "RestartForceExitStatus=75",
        "RestartPreventExitStatus=78",
        "TimeoutStartSec=90",
        f"TimeoutStopSec={p.timeout_stop_s}",
        # open files: the control port's connection cap stays under half of this
        "LimitNOFILE=65536",
        f"WatchdogSec={p.watchdog_sec}",
        "KillMode=mixed",
        "UMask=0077",
    ]
    rw = " ".join(dict.fromkeys((p.home, p.workspace)))
    if user_unit:
        lines.extend(_USER_HARDENING.format(rw_paths=rw).splitlines())
    else:
        lines.insert(lines.index("Restart=always"), f"User={p.user}")
        lines.extend(_HARDENING.format(rw_paths=rw).splitlines())
    lines += ["", "[Install]", f"WantedBy={'default.target' if user_unit else 'multi-user.target'}"]
    return "\n".join(lines) + "\n"


def render_selfcheck(p: UnitParams, *, user_unit: bool) -> tuple[str, str]:
    """A oneshot `hermes doctor` and the timer that runs it hourly."""
    cmd = " ".join(
        shlex.quote(a) for a in (p.python, "-m", "hermes_gateway", "doctor", "--config", p.config)
    )
    service = [
        "[Unit]",
        "Description=Hermes Gateway self-check (hermes doctor)",
        "",
        "[Service]",
        "Type=oneshot",
        f"ExecStart={cmd}",
        f"Environment=HERMES_HOME={p.home}",
        f"EnvironmentFile=-{p.env_file}",
    ]
    if not user_unit:
        service.insert(service.index("Type=oneshot"), f"User={p.user}")
    timer = [
        "[Unit]",
        "Description=Run the Hermes Gateway self-check hourly",
        "",
        "[Timer]",
        "OnBootSec=5min",
        "OnUnitActiveSec=1h",
        "Persistent=true",
        "",
        "[Install]",
        "WantedBy=timers.target",
    ]
    return "\n".join(service) + "\n", "\n".join(timer) + "\n"


def unit_dir(user_unit: bool) -> Path:
    if user_unit:
        return Path.home() / ".config" / "systemd" / "user"
    return Path("/etc/systemd/system")


def env_template() -> str:
    """The service's secrets file, every variable a setting can come from listed empty: the
    model's key, then each installed platform's (its `PlatformSpec.secrets`)."""
    names = ["OPENAI_API_KEY"]
    for spec in platform_specs():
        names += [env for env in spec.secrets.values() if env and env not in names]
    lines = [
        "# Secrets for the Hermes Gateway service (read by systemd; keep this file mode 600).",
        *(f"# {name}=" for name in names),
    ]
    return "\n".join(lines) + "\n"


class ServiceManager:
    """Writes the units and drives systemctl; ``run`` is injectable so tests record commands."""

    def __init__(
        self,
        params: UnitParams,
        *,
        user_unit: bool,
        dry_run: bool = False,
        out: Callable[[str], None] = print,
        run: Callable[[Sequence[str]], int] | None = None,
    ) -> None:
        self.params = params
        self.user_unit = user_unit
        self.dry_run = dry_run
        self.out = out
        self._run = run or _run

    def _systemctl(self, *args: str) -> list[str]:
        return ["systemctl", *(["--user"] if self.user_unit else []), *args]

    @property
    def unit_path(self) -> Path:
        return unit_dir(self.user_unit) / SERVICE

    def installed(self) -> bool:
        return self.unit_path.exists()

    def install(self) -> int:
        directory = unit_dir(self.user_unit)
        service = render_service(self.params, user_unit=self.user_unit)
        check, timer = render_selfcheck(self.params, user_unit=self.user_unit)
        files = {SERVICE: service, SELFCHECK_SERVICE: check, SELFCHECK_TIMER: timer}
        commands = [
            self._systemctl("daemon-reload"),
            self._systemctl("enable", "--now", SERVICE),
            self._systemctl("enable", "--now", SELFCHECK_TIMER),
        ]
        if self.user_unit:
            # without linger the user's services die at logout
            commands.append(["loginctl", "enable-linger", self.params.user])
        if self.dry_run:
            for name, text in files.items():
                self.out(f"# {directory / name}\n{text}")
            self.out("# commands")
            for cmd in commands:
                self.out(" ".join(cmd))
            return 0
        directory.mkdir(parents=True, exist_ok=True)
        for name, text in files.items():
            (directory / name).write_text(text)
        self._ensure_env_file()
        return self._run_all(commands)

    def uninstall(self) -> int:
        commands = [
            self._systemctl("disable", "--now", SELFCHECK_TIMER),
            self._systemctl("disable", "--now", SERVICE),
        ]
        if self.dry_run:
            for cmd in commands:
                self.out(" ".join(cmd))
            return 0
        code = self._run_all(commands, stop_on_error=False)
        for name in (SERVICE, SELFCHECK_SERVICE, SELFCHECK_TIMER):
            (unit_dir(self.user_unit) / name).unlink(missing_ok=True)
        return code or self._run(self._systemctl("daemon-reload"))

    def control(self, action: str) -> int:
        """start / stop / restart / status through systemctl."""
        cmd = self._systemctl(action, SERVICE)
        if self.dry_run:
            self.out(" ".join(cmd))
            return 0
        return self._run(cmd)

    def state(self) -> str:
        """systemd's view: active, inactive, failed, ... or "not installed"."""
        if not self.installed() or shutil.which("systemctl") is None:
            return "not installed"
        proc = subprocess.run(
            self._systemctl("is-active", SERVICE), capture_output=True, text=True, check=False
        )
        return proc.stdout.strip() or "unknown"

    def _ensure_env_file(self) -> None:
        path = Path(self.params.env_file)
        if not path.exists():
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(env_template())
            os.chmod(path, 0o600)

    def _run_all(self, commands: list[list[str]], stop_on_error: bool = True) -> int:
        worst = 0
        for cmd in commands:
            code = self._run(cmd)
            if code:
                self.out(f"command failed ({code}): {' '.join(cmd)}")
                worst = code
                if stop_on_error:
                    return code
        return worst


def _run(cmd: Sequence[str]) -> int:
    return subprocess.run(list(cmd), check=False).returncode
