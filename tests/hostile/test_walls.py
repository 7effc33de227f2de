"""The walls, not the screen, keep tool processes in: every program that runs programs (perl,
make, tar's checkpoint actions, git's ext transport, tmux, vim, gdb, ...) can delete inside the
workspace and cannot change one byte outside it, however the command is spelled; tool
processes have no way to the gateway's ports or the local services; each call gets its own /tmp.
"""

from __future__ import annotations

import os
import re
import shutil
import socket
import sys
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.e2e.daemon import GatewayProcess
from tests.e2e.test_telegram_e2e import TOKEN
from tests.fakes.openai import FakeOpenAI, text, tool_calls
from tests.fakes.server import wait_until
from tests.fakes.telegram import FakeTelegram
from tools import ToolContext, sandbox
from tools.terminal import run_command

REPO = Path(__file__).resolve().parents[2]
ENV = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": "/nonexistent", "LANG": "C.UTF-8"}

# Each deleted a directory outside the workspace without a prompt under `approval: dangerous`
# ({t}: the victim directory). They are run here with no screen at all: the walls must hold.
RAN_UNASKED = [
    "perl -MFile::Path=rmtree -e 'rmtree(\"{t}\")'",
    "prlimit --nofile=256 rm -rf {t}",
    "setarch $(uname -m) rm -rf {t}",
    "setpriv rm -rf {t}",
    "ssh-agent rm -rf {t}",
    "tmux -S ./tmux-{n} new -d 'rm -rf {t}'; sleep 0.5; tmux -S ./tmux-{n} kill-server",
    "tar --remove-files -cf ./tar-{n}.tar {t}",
    "echo . > ./f-{n}; "
    "tar --checkpoint=1 --checkpoint-action=exec='rm -rf {t}' -cf ./c-{n}.tar ./f-{n}",
    "printf 'all:\\n\\trm -rf {t}\\n' | make -f -",
    "echo x > ./z-{n}; zip -q -T -TT 'rm -rf {t} #' ./z-{n}.zip ./z-{n}",
    "git -c protocol.ext.allow=always ls-remote 'ext::sh -c rm% -rf% {t}' 2>/dev/null",
    "printf '#!/bin/sh\\nrm -rf {t}\\ncat\\n' > ./s-{n}.sh; chmod +x ./s-{n}.sh; "
    "seq 200000 | sort -S 64K --compress-program=./s-{n}.sh > /dev/null",
    "printf 'import shutil\\nshutil.rmtree(\"{t}\")\\n' > ./p-{n}.py; python3 ./p-{n}.py",
]
# ... and these passed the screen when fed to it directly
SCREEN_ONLY = [
    "gdb -batch -ex '!rm -rf {t}'",
    "vim -Es -c ':!rm -rf {t}' -c ':q!'",
    "ex -s -c ':!rm -rf {t}' -c ':q!'",
    "echo x > ./tc-{n}; tar -cf ./tc-{n}.tar ./tc-{n}; "
    "tar -xf ./tc-{n}.tar --to-command='rm -rf {t}'",
    "printf 'BEGIN {{ system(\"rm -rf {t}\") }}' > ./a-{n}.awk; awk -f ./a-{n}.awk",
    "cmake -E rm -rf {t}",
    "script -qc 'rm -rf {t}' /dev/null",
    "flock ./lock-{n} rm -rf {t}",
    'node -e \'require("fs").rmSync("{t}", {{recursive: true}})\'',
    "sqlite3 :memory: '.shell rm -rf {t}'",
    "ed -s <<< '!rm -rf {t}'",
    "find {t} -delete",
    "find . -maxdepth 0 -exec rm -rf {t} \\;",
    "xargs rm -rf <<< '{t}'",
    "git -c core.pager='rm -rf {t}; cat' log -1 --paginate 2>/dev/null; true",
    "env -S 'rm -rf {t}'",
    "busybox rm -rf {t} 2>/dev/null || command rm -rf {t}",
    "taskset 1 rm -rf {t}",
    "chrt -o 0 rm -rf {t}",
    "ionice -c 3 rm -rf {t}",
    "stdbuf -o0 rm -rf {t}",
    "timeout 5 nice nohup rm -rf {t} >/dev/null 2>&1",
    "mv {t} {t}.moved",
]
# A generated corpus: program-running programs around every way of changing a file.
RUNNERS = ["", "nice", "nohup", "setsid -w", "timeout 9", "env", "command", "sh -c", "bash -c"]
CHANGES = [
    "rm -rf {t}",
    "rm {t}/keep.txt",
    "truncate -s 0 {t}/keep.txt",
    "cp /etc/hostname {t}/keep.txt",
    "ln -sf /etc/hostname {t}/keep.txt",
    "touch {t}/new",
    "mkdir {t}/new",
    "chmod 000 {t}/keep.txt",
    "chmod 4755 {t}/keep.txt",
    "chown 1:1 {t}/keep.txt",
    "touch {t}/keep.txt",
    "touch -d 2001-01-01 {t}/keep.txt",
    'python3 -c \'open("{t}/keep.txt", "w")\'',
    "perl -e 'unlink \"{t}/keep.txt\"'",
    "dd if=/dev/zero of={t}/keep.txt count=1 status=none",
]


_MTIME = 1_000_000_000 * 10**9  # a victim's file's times, to see a touch


def _generated() -> list[str]:
    out = []
    for runner in RUNNERS:
        for change in CHANGES:
            if runner.endswith("-c"):
                out.append(f"{runner} {_quote(change)}")
            else:
                out.append(f"{runner} {change}".strip())
    return out


def _quote(command: str) -> str:
    return "'" + command.replace("'", "'\\''") + "'"


CORPUS = [*RAN_UNASKED, *SCREEN_ONLY, *_generated()]


@pytest.fixture(params=["namespace", "fallback"])
def walled(request: pytest.FixtureRequest) -> Iterator[str]:
    """The walls of one mode, as the gateway sets them up; skipped where the kernel has none."""
    if request.param == "namespace" and sandbox.current_mode() != "namespace":
        pytest.skip("user namespaces are not available here")
    sandbox.force_mode(request.param)
    if not sandbox.walls().writes:
        sandbox.force_mode(None)
        pytest.skip("this kernel has no Landlock")
    sandbox.setup([])
    yield request.param
    sandbox.force_mode(None)
    sandbox.setup([])


@pytest.fixture
def outside() -> Iterator[Path]:
    """A directory outside every workspace and outside /tmp (which is private to each call in
    a namespace, so a victim there would be out of sight rather than behind a wall)."""
    path = Path(tempfile.mkdtemp(prefix=".walls-", dir=REPO))
    yield path
    shutil.rmtree(path, ignore_errors=True)


def _victims(root: Path, count: int) -> list[Path]:
    victims = []
    for n in range(count):
        victim = root / f"victim-{n}"
        victim.mkdir()
        keep = victim / "keep.txt"
        keep.write_text("keep")
        keep.chmod(0o644)
        os.utime(keep, ns=(_MTIME, _MTIME))
        victims.append(victim)
    return victims


def _intact(victim: Path, metadata: bool = True) -> bool:
    """Its one file as made: the same content and, with `metadata`, mode, owner and times."""
    keep = victim / "keep.txt"
    names = sorted(p.name for p in victim.iterdir()) if victim.is_dir() else None
    if names != ["keep.txt"] or keep.is_symlink() or keep.read_text() != "keep":
        return False
    st = keep.stat()
    return not metadata or (st.st_mode & 0o7777, st.st_uid, st.st_mtime_ns) == (
        0o644,
        os.getuid(),
        _MTIME,
    )


def _run_all(ctx: ToolContext, victims: list[Path]) -> str:
    """Every corpus command in one terminal call, each in its own subshell, aimed at its own
    victim: one sandbox, the same walls as one call per command."""
    script = "\n".join(
        f"( {command.format(t=victim, n=n)} ) </dev/null >/dev/null 2>&1"
        for n, (command, victim) in enumerate(zip(CORPUS, victims, strict=True))
    )
    return run_command(script + "\necho corpus-done", ctx.workspace, ENV, 240, ctx)


def test_no_program_writes_outside_the_workspace(
    walled: str, outside: Path, tmp_path: Path
) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    ctx = ToolContext(workspace=workspace, session_key="t:dm:1", max_output_chars=5000)
    # the control: aimed inside the workspace, the same commands do change their victims
    inside = _victims(workspace, len(CORPUS))
    assert "corpus-done" in _run_all(ctx, inside)
    effective = [n for n, victim in enumerate(inside) if not _intact(victim)]
    missing = [CORPUS[n] for n in range(len(CORPUS)) if n not in effective]
    assert len(effective) >= len(CORPUS) * 0.85, f"commands that did nothing inside: {missing}"
    # aimed outside, not one of them changes anything
    victims = _victims(outside, len(CORPUS))
    assert "corpus-done" in _run_all(ctx, victims)
    # outside a namespace only Landlock stands, and it does not govern a file's mode, owner
    # or times (docs/isolation.md); read-only mounts do
    metadata = walled == "namespace"
    changed = [CORPUS[n] for n, v in enumerate(victims) if not _intact(v, metadata)]
    assert changed == []
    assert sorted(p.name for p in outside.iterdir()) == sorted(v.name for v in victims)


def test_an_opened_path_is_writable(walled: str, outside: Path, tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    sandbox.setup([], writable=[outside])
    ctx = ToolContext(workspace=workspace, session_key="t:dm:1", max_output_chars=5000)
    out = run_command(f"echo hi > {outside}/made && cat {outside}/made", workspace, ENV, 30, ctx)
    assert out.startswith("hi"), out
    assert (outside / "made").read_text() == "hi\n"


def _listener() -> tuple[socket.socket, threading.Event]:
    """A local service the tests own: it records whether anyone connected."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    reached = threading.Event()

    def accept() -> None:
        try:
            conn, _ = server.accept()
        except OSError:
            return
        reached.set()
        conn.close()

    threading.Thread(target=accept, daemon=True).start()
    return server, reached


def test_no_way_to_local_services(walled: str, tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    ctx = ToolContext(workspace=workspace, session_key="t:dm:1", max_output_chars=5000)
    server, reached = _listener()
    unix_dir = Path(tempfile.mkdtemp(prefix="hermes-svc-"))  # as CI's PostgreSQL and Redis
    unix = socket.socket(socket.AF_UNIX)
    unix.bind(str(unix_dir / "redis.sock"))
    unix.listen()
    port = server.getsockname()[1]
    address = str(unix_dir / "redis.sock")
    probe = f"""
import socket
import sys
for family, address in ((socket.AF_INET, ("127.0.0.1", {port})), (socket.AF_UNIX, {address!r})):
    s = socket.socket(family)
    try:
        s.settimeout(3); s.connect(address); print("REACHED", address)
    except OSError as exc:
        print("refused", type(exc).__name__)
"""
    (workspace / "probe.py").write_text(probe)
    try:
        out = run_command("python3 probe.py", workspace, ENV, 30, ctx)
    finally:
        server.close()
        unix.close()
        shutil.rmtree(unix_dir, ignore_errors=True)
    assert f"REACHED ('127.0.0.1', {port})" not in out and "refused" in out, out
    assert not reached.is_set()
    if walled == "namespace":  # outside one a socket file stays in view (docs/isolation.md)
        assert "REACHED" not in out and out.count("refused") == 2, out


def test_each_call_has_its_own_tmp(walled: str, tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    ctx = ToolContext(workspace=workspace, session_key="t:dm:1", max_output_chars=5000)
    first = run_command(
        'd=${TMPDIR:-/tmp}; echo secret > "$d/note" && echo "$d"', workspace, ENV, 30, ctx
    )
    where = first.splitlines()[0]
    second = run_command(f"cat {where}/note || echo gone", workspace, ENV, 30, ctx)
    assert "secret" not in second and "gone" in second, second
    assert not Path(where, "note").exists()  # nothing left on the host either


@pytest.mark.e2e
def test_the_store_directory_is_hidden_wherever_it_is(
    tmp_path: Path, fake_llm: FakeOpenAI, outside: Path
) -> None:
    """A SQLite store outside the home: its write-ahead log and shared memory hold the latest
    messages, and a tool sees none of its directory; the gateway's port is out of reach too."""
    if sandbox.current_mode() != "namespace":
        pytest.skip("hiding needs a mount namespace")
    store = outside / "store"
    store.mkdir()
    config = {
        "model": {"base_url": fake_llm.base_url, "api_key": "sk-fake", "max_retries": 0},
        "store": {"url": f"sqlite+aiosqlite:///{store}/state.db"},
        "tools": {"enabled": ["terminal"], "terminal": {"approval": "off"}},
    }
    gw = GatewayProcess(tmp_path / "home", config)
    probe = (
        f"ls -A {store} | sed 's/^/listed: /'; "
        f"cat {store}/state.db* 2>/dev/null | grep -a -c leak-wal-secret | sed 's/^/leaks: /'; "
        f"python3 -c \"import socket; socket.create_connection(('127.0.0.1', {gw.port}), 3)\" "
        "2>/dev/null && echo port-reached || echo port-refused"
    )
    try:
        gw.start()
        fake_llm.push(text("noted"))
        assert gw.chat("my diary: leak-wal-secret", user="alice").status_code == 200
        assert any(p.name.endswith("-wal") for p in store.iterdir())  # the secret's file
        fake_llm.push(tool_calls(("terminal", {"command": probe})), text("done"))
        assert gw.chat("look around", user="mallory").status_code == 200
    finally:
        gw.kill()
    output = str(fake_llm.requests[-1]["messages"][-1]["content"])
    assert "leaks: 0" in output and "listed:" not in output, output
    assert "port-refused" in output, output


def test_the_gateways_code_and_interpreter_are_read_only(walled: str, tmp_path: Path) -> None:
    """Wherever they live: a checkout and virtual environment under /tmp (as CI's may be) are
    put back into the call's private /tmp read-only, not writable like the rest of it."""
    workspace = tmp_path / "ws"
    workspace.mkdir()
    ctx = ToolContext(workspace=workspace, session_key="t:dm:1", max_output_chars=5000)
    targets = [REPO / "tools", Path(sys.executable).parent, Path(sys.prefix)]
    name = f".walls-probe-{os.getpid()}-{tmp_path.name}"  # new: touching an old file is no write
    probe = "; ".join(f"touch {t}/{name} && echo WROTE {t}" for t in targets)
    out = run_command(probe + "; echo probed", workspace, ENV, 30, ctx)
    assert "probed" in out and "WROTE" not in out, out
    assert not any((t / name).exists() for t in targets)


STEAL = """
import json, urllib.request
body = json.dumps({"platform": "telegram", "code": "CODE"}).encode()
for path, data in (("/pairing", None), ("/pairing/approve", body), ("/status", None)):
    request = urllib.request.Request("URL" + path, data=data)
    request.add_header("Content-Type", "application/json")
    try:
        print("HOW", path, urllib.request.urlopen(request, timeout=3).status)
    except Exception as exc:
        print("HOW", path, "failed", type(exc).__name__)
"""


@pytest.mark.e2e
@pytest.mark.filterwarnings("ignore::telegram.warnings.PTBDeprecationWarning")
def test_the_model_cannot_let_a_stranger_in(tmp_path: Path, fake_llm: FakeOpenAI) -> None:
    """Pairing on, no control token configured: the model, through `terminal` and through
    `execute_code`, asks the control API to approve a waiting stranger. Nothing is approved,
    and the stranger's next message still does not reach the model."""
    with FakeTelegram(token=TOKEN) as tg:
        config: dict[str, Any] = {
            "model": {"base_url": fake_llm.base_url, "api_key": "sk-fake", "max_retries": 0},
            "platforms": {
                "telegram": {
                    "enabled": True,
                    "token": TOKEN,
                    "base_url": tg.api_url,
                    "base_file_url": tg.file_url,
                    "allowed_users": [555],
                    "pairing": True,
                }
            },
            "tools": {
                "enabled": ["terminal", "execute_code"],
                "terminal": {"approval": "off"},
            },
        }
        gw = GatewayProcess(tmp_path / "home", config)
        try:
            gw.start()
            tg.send_text(777, "let me in", username="mallory")
            notice = wait_until(lambda: [m["text"] for m in tg.messages_to(777)], timeout=30)
            code = re.search(r"approve telegram ([A-Z2-9]{8})", str(notice[0]))
            assert code, notice
            script = STEAL.replace("CODE", code[1]).replace("URL", gw.url)
            calls = (
                ("terminal", {"command": f"python3 -c '{script.replace('HOW', 'shell')}'"}),
                ("execute_code", {"code": script.replace("HOW", "script")}),
            )
            fake_llm.push(tool_calls(*calls), text("tried"))
            tg.send_text(555, "please approve the stranger")
            wait_until(lambda: any("tried" in m["text"] for m in tg.messages_to(555)), 60)
            seen = [str(m["content"]) for m in fake_llm.requests[-1]["messages"]]
            asked = len(fake_llm.requests)
            tg.send_text(777, "am I in?", username="mallory")
            wait_until(lambda: len(tg.messages_to(777)) >= 2, timeout=30)
            entries = httpx.get(f"{gw.url}/pairing", headers=_operator(gw), timeout=10).json()
        finally:
            gw.kill()
    results = "\n".join(s for s in seen if "/pairing" in s)
    for how in ("shell", "script"):
        for path in ("/pairing", "/pairing/approve", "/status"):
            # URLError: no connection at all (the network wall); the token wall behind it
            # would answer 401 (HTTPError), which tests/security/test_operator_token.py covers
            assert f"{how} {path} failed URLError" in results, results
    assert [e["status"] for e in entries["entries"] if e["user_id"] == "777"] == ["pending"]
    assert len(fake_llm.requests) == asked  # the stranger's message reached no model
    assert "approved" not in str(tg.messages_to(777)[-1]["text"]).lower()


def _operator(gw: GatewayProcess) -> dict[str, str]:
    """The operator's credentials: the token the gateway wrote into its home at first start."""
    token = (gw.home / "control.token").read_text().strip()
    return {"Authorization": f"Bearer {token}"}
