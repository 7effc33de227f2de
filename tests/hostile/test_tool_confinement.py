"""The agent's hands against the real gateway process: a `terminal` command cannot read the
gateway's environment, its unlisted secrets or its home, and nothing it starts — setsid, double
forks, nohup — outlives `/stop`, the tool's timeout or the command itself."""

from __future__ import annotations

import contextlib
import os
import signal
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from hermes_gateway.config import load_config
from hermes_gateway.errors import ConfigError
from tests.e2e.daemon import GatewayProcess
from tests.fakes.openai import FakeOpenAI, text, tool_calls
from tools import sandbox

pytestmark = pytest.mark.e2e

SECRETS = {  # unlisted names a deny-list misses; every value starts with "leak-"
    "MY_APIKEY": "leak-my-apikey",
    "DB_PASS": "leak-db-pass",
    "SENTRY_DSN": "leak-sentry-dsn",
    "GH_PAT": "leak-gh-pat",
}


@pytest.fixture(scope="module")
def gateway(
    tmp_path_factory: pytest.TempPathFactory, openai_server: FakeOpenAI
) -> Iterator[GatewayProcess]:
    home = tmp_path_factory.mktemp("confinement") / "home"
    home.mkdir()
    (home / "gateway.env").write_text("BOT_TOKEN=leak-gateway-env\n")
    (home / "config.yaml").write_text("# leak-home-config\n")
    elsewhere = home.parent / "operator-secrets"  # hidden because tools.terminal.hide_paths
    elsewhere.mkdir()
    (elsewhere / "id_rsa").write_text("leak-hidden-path\n")
    config = {
        "model": {"base_url": openai_server.base_url, "api_key": "sk-fake", "max_retries": 0},
        "tools": {
            "enabled": ["terminal"],
            "terminal": {
                "approval": "off",
                "env_passthrough": ["HERMES_PASSED"],
                "hide_paths": [str(elsewhere)],
            },
        },
    }
    env = {**SECRETS, "HERMES_PASSED": "passed-through"}
    gw = GatewayProcess(home, config, env=env)
    gw.config_path.write_text(gw.config_path.read_text() + "# leak-config-file\n")
    gw.start()
    yield gw
    gw.kill()


def run_tool(gw: GatewayProcess, llm: FakeOpenAI, user: str, **args: object) -> str:
    """Has the model call `terminal` with `args`; returns the result the model was sent."""
    llm.push(tool_calls(("terminal", args)), text("done"))
    assert gw.chat("run it", user=user).status_code == 200
    return str(llm.requests[-1]["messages"][-1]["content"])


def test_the_terminal_cannot_reach_the_gateways_secrets_or_state(
    gateway: GatewayProcess, fake_llm: FakeOpenAI
) -> None:
    fake_llm.push(text("noted"))
    assert gateway.chat("my diary: leak-alice-diary", user="alice").status_code == 200
    home, conf, elsewhere = (
        gateway.home,
        gateway.config_path,
        gateway.home.parent / "operator-secrets",
    )
    read_all = (
        "{ env; tr '\\0' '\\n' < /proc/$PPID/environ;"
        " for f in /proc/[0-9]*/environ; do tr '\\0' '\\n' < $f; done;"
        f" cat {home}/state.db* {home}/gateway.env {home}/config.yaml {conf} {elsewhere}/*; }}"
        " 2>/dev/null"
        " | grep -a -o 'leak-[a-z-]*' | sort -u;"
        " for f in /proc/[0-9]*/cmdline; do tr '\\0' ' ' < $f; echo; done"
        " | grep -c '[h]ermes_gateway gateway run' | sed 's/^/gateway-processes=/';"
        " echo passed=$HERMES_PASSED; echo hi > written-by-tool; echo scan-done"
    )
    output = run_tool(gateway, fake_llm, "mallory", command=read_all)
    assert "scan-done" in output and "[exit code" in output
    assert "leak-" not in output, output
    assert "gateway-processes=0" in output, output
    assert "passed=passed-through" in output  # a name the operator listed does arrive
    # the workspace inside the hidden home is still the real one
    assert (home / "workspace" / "written-by-tool").read_text() == "hi\n"


def test_the_home_is_owner_only_and_the_mode_is_logged(gateway: GatewayProcess) -> None:
    modes = {p.name: stat.S_IMODE(p.stat().st_mode) for p in (gateway.home, gateway.config_path)}
    modes["gateway.env"] = stat.S_IMODE((gateway.home / "gateway.env").stat().st_mode)
    assert modes == {
        gateway.home.name: 0o700,
        gateway.config_path.name: 0o600,
        "gateway.env": 0o600,
    }
    [line] = [e for e in gateway.log_events() if e["event"] == "sandbox.mode"]
    assert line["mode"] == sandbox.current_mode() and line["detail"]


ESCAPES = {
    # job control (set -m) gives each background job its own process group, as an agent may
    "setsid": "setsid sleep {m} >/dev/null 2>&1 </dev/null &",
    "double fork": "set -m; sh -c '(sleep {m} >/dev/null 2>&1 &) &'",
    "nohup": "set -m; nohup sleep {m} >/dev/null 2>&1 & disown",
}


def running(marker: str) -> list[int]:
    """Live processes (zombies excluded) whose command line holds `marker`."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ")
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if f"sleep {marker}".encode() in cmdline and state != "Z":
            found.append(int(pid))
    return found


def eventually_none(marker: str, within: float = 5.0) -> list[int]:
    deadline = time.monotonic() + within
    while (left := running(marker)) and time.monotonic() < deadline:
        time.sleep(0.05)
    return left


@pytest.fixture
def marker(request: pytest.FixtureRequest) -> Iterator[str]:
    """A unique `sleep` duration naming this case's processes; killed after the case."""
    value = f"900.{abs(hash(request.node.name)) % 10**6:06d}"
    yield value
    for pid in running(value):
        os.kill(pid, signal.SIGKILL)


@pytest.mark.parametrize("escape", list(ESCAPES))
@pytest.mark.parametrize("end", ["/stop", "timeout", "exit"])
def test_nothing_a_command_starts_outlives_it(
    gateway: GatewayProcess, fake_llm: FakeOpenAI, marker: str, escape: str, end: str
) -> None:
    user = f"escaper-{marker}"
    command = ESCAPES[escape].format(m=marker) + ("\nsleep 1.5" if end == "exit" else "\nsleep 60")
    args: dict[str, object] = {"command": command}
    if end == "timeout":
        args["timeout_s"] = 2
    results: list[str] = []

    def call() -> None:
        if end == "/stop":  # interrupted: the model is never sent a result
            fake_llm.push(tool_calls(("terminal", args)))
            gateway.chat("run it", user=user)
        else:
            results.append(run_tool(gateway, fake_llm, user, **args))

    worker = threading.Thread(target=call)
    worker.start()
    deadline = time.monotonic() + 20
    while not running(marker) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert running(marker), "the escaping process never started"
    if end == "/stop":
        reply = httpx.post(
            f"{gateway.url}/v1/chat/completions",
            json={"user": user, "messages": [{"role": "user", "content": "/stop"}]},
            timeout=30,
        )
        assert reply.status_code == 200
    worker.join(30)
    assert not worker.is_alive()
    if end == "timeout":
        assert "timed out after 2 s" in results[0]
    elif end == "exit":
        assert "[exit code 0" in results[0]
    assert eventually_none(marker) == [], f"{escape} outlived the command ({end})"


def test_a_killed_gateway_takes_its_commands_with_it(
    tmp_path: Path, fake_llm: FakeOpenAI, marker: str
) -> None:
    if sandbox.current_mode() != "namespace":
        pytest.skip("only a namespace ties its processes to the gateway's life")
    config = {
        "model": {"base_url": fake_llm.base_url, "api_key": "sk-fake", "max_retries": 0},
        "tools": {"enabled": ["terminal"], "terminal": {"approval": "off"}},
    }
    gw = GatewayProcess(tmp_path / "home", config).start()
    try:
        command = ESCAPES["setsid"].format(m=marker) + "\nsleep 60"
        fake_llm.push(tool_calls(("terminal", {"command": command})))

        def chat() -> None:
            with contextlib.suppress(httpx.HTTPError):  # the gateway dies under it
                gw.chat("run it", user="crash")

        worker = threading.Thread(target=chat)
        worker.start()
        deadline = time.monotonic() + 20
        while not running(marker) and time.monotonic() < deadline:
            time.sleep(0.02)
        assert running(marker), "the escaping process never started"
        gw.signal(signal.SIGKILL)
        gw.wait()
        assert eventually_none(marker) == [], "a command outlived its gateway"
    finally:
        gw.kill()
        worker.join(30)


@pytest.fixture
def fallback() -> Iterator[None]:
    """The sandbox as on a machine without user namespaces (no prctl on the test process)."""
    sandbox.force_mode("fallback")
    yield
    sandbox.force_mode(None)


@pytest.mark.usefixtures("fallback")
@pytest.mark.parametrize("escape", [*ESCAPES, "env -i setsid"])
def test_the_fallback_mode_kills_escaped_processes_too(
    tmp_path: Path, marker: str, escape: str
) -> None:
    form = ESCAPES.get(escape, "env -i setsid sleep {m} >/dev/null 2>&1 </dev/null &")
    command = form.format(m=marker) + "\nsleep 0.5"
    child = sandbox.spawn(["/bin/bash", "-c", command], cwd=tmp_path, workspace=tmp_path, env={})
    while child.poll() is None:  # what the terminal does: poll (tracking descendants), then kill
        time.sleep(0.05)
    assert running(marker), "the escaping process never started"
    child.kill()
    assert eventually_none(marker, within=2) == [], f"{escape} outlived its sandbox"


@pytest.mark.parametrize(
    ("terminal", "needle"),
    [
        ("env_passthrough: [BAD-NAME]", "not environment variable names: 'BAD-NAME'"),
        ("hide_paths: [relative/dir]", "not absolute paths: 'relative/dir'"),
    ],
)
def test_bad_sandbox_keys_name_the_key(tmp_path: Path, terminal: str, needle: str) -> None:
    path = tmp_path / "config.yaml"
    path.write_text(f"tools:\n  terminal:\n    {terminal}\n")
    with pytest.raises(ConfigError) as caught:
        load_config(path, {"HOME": str(tmp_path)})
    assert "tools.terminal." in str(caught.value) and needle in str(caught.value)


@pytest.fixture
def protected() -> Iterator[None]:
    yield
    sandbox.setup([])  # hide nothing again in this test process


@pytest.mark.usefixtures("protected")
def test_what_is_hidden_stays_hidden_inside_the_workspace(tmp_path: Path) -> None:
    if sandbox.current_mode() != "namespace":
        pytest.skip("only a namespace can hide files")
    home = tmp_path / "home"
    (home / "workspace" / "conf").mkdir(parents=True)
    (home / "state.db").write_text("leak-db")
    (home / "workspace" / "conf" / "gateway.yaml").write_text("leak-config")
    (home / "workspace" / "notes.txt").write_text("visible")
    sandbox.setup([home, home / "workspace" / "conf" / "gateway.yaml"])
    ws = home / "workspace"
    command = f"cat {home}/state.db notes.txt conf/gateway.yaml 2>/dev/null; echo; ls {home}"
    child = sandbox.spawn(["/bin/sh", "-c", command], cwd=ws, workspace=ws, env={})
    assert child.stdout is not None
    output = child.stdout.read().decode()
    child.kill()
    assert output.split() == ["visible", "workspace"], output


_UNDER_SYSTEMD = """
import os, sys, tempfile
from pathlib import Path
from tools import sandbox
home = Path(tempfile.mkdtemp()); (home / "secret").write_text("s3cret")
ws = home / "workspace"; ws.mkdir()
print(sandbox.setup([home]))
print(sandbox.current_mode(), sandbox._state.fresh_proc)
c = sandbox.spawn(
    ["/bin/sh", "-c", f"cat {home}/secret; cat /proc/{os.getpid()}/environ"],
    cwd=ws, workspace=ws, env={"PATH": "/usr/bin:/bin", "MY_APIKEY": ""},
)
print(c.stdout.read().decode()); c.kill()
"""


@pytest.mark.skipif(not sandbox.shutil.which("unshare"), reason="needs util-linux unshare")
def test_where_a_private_proc_is_refused_the_gateway_environment_stays_unreadable() -> None:
    """systemd's ProtectKernelTunables= lays a read-only /proc/sys over /proc, and the kernel
    then refuses a fresh /proc in a new namespace: the sandbox keeps its namespaces (the home
    hidden, everything killed with it) and makes the gateway's own /proc entries unreadable."""
    protect = "mount --bind /proc/sys /proc/sys && mount -o remount,bind,ro /proc/sys"
    script = f'{protect} && exec "$0" -c "$1"'
    proc = subprocess.run(
        ["unshare", "-m", "sh", "-c", script, sys.executable, _UNDER_SYSTEMD],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "MY_APIKEY": "sk-leak-me-0123456789"},
        cwd=Path(__file__).resolve().parents[2],
    )
    assert proc.returncode == 0, proc.stderr
    assert "namespace False" in proc.stdout  # namespaces kept, the host's /proc in view
    assert "s3cret" not in proc.stdout  # the home is still hidden
    assert "sk-leak-me" not in proc.stdout and "Permission denied" in proc.stdout
