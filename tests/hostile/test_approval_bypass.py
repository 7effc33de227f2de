"""The dangerous-command screen cannot be bypassed by wrapping (``bash -c``, inline interpreter
code, ``find -delete``, variables, decoding into a shell, ...), ordinary commands still run
without a prompt, and in a shared thread only the user whose message started the run can
answer the approval (real slack-bolt against `FakeSlack`; a real `hermes gateway run`)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from hermes_gateway.agents.tool_host import shown_action, who
from hermes_gateway.events import MessageEvent
from tests.e2e.daemon import GatewayProcess
from tests.fakes.openai import FakeOpenAI, text, tool_calls
from tests.fakes.slack import FakeSlack
from tests.integration.test_slack import ALICE, answered, slack_config, started, texts
from tools.approval import dangerous_reason

BOB = "U456"

# each was run without approval before the screen parsed the command line
BYPASSES = [
    "bash -c 'rm -r ../outside'",
    "sh -c \"bash -c 'rm -rf build'\"",
    "env FOO=1 bash -lc 'rm -r build'",
    "timeout 5 bash -c 'rm -r build'",
    "python3 -c \"import shutil; shutil.rmtree('../outside')\"",
    "python3 -c \"import os; os.system('rm -r ../outside')\"",
    "python3 -c \"exec(bytes.fromhex('7072696e74').decode())\"",
    "python3 -c \"open('/etc/motd', 'w').write('x')\"",
    "perl -e 'unlink glob \"../outside/*\"'",
    "ruby -e 'FileUtils.rm_rf(\"../outside\")'",
    'node -e \'require("fs").rmSync("../outside", {recursive: true})\'',
    "awk 'BEGIN { system(\"rm -r ../outside\") }'",
    "find ../outside -delete",
    "find . -name build -delete",
    "find /etc -name '*.conf' -exec rm {} +",
    "find . -exec sh -c 'rm -r \"$1\"' _ {} \\;",
    "ls | xargs rm",
    "xargs -I{} rm {} < list.txt",
    "xargs -n 1 rm -r < list.txt",
    "D=/tmp/elsewhere; echo X > $D/f",
    "D=/tmp/elsewhere; echo X > ${D}/f",
    "export D=/etc; touch $D/x",
    'echo X > "$OUT"',
    "cd /etc && echo X > motd",
    "cd .. && rm outside/keep.txt",
    "echo cm0gLXIgLi4vb3V0c2lkZQ== | base64 -d | sh",
    "echo cm0gLXIgLi4vb3V0c2lkZQ== | base64 --decode | bash",
    "printf 'rm -r ../outside' | sh",
    "cat cleanup.txt | python3",
    "echo 726d202d72 | xxd -r -p | ./run",
    "eval 'rm -rf build'",
    "CMD='rm -rf build'; eval $CMD",
    "$CMD -rf build",
    "$'\\x72\\x6d' -rf build",
    'echo "$(rm -rf build)"',
    "echo `rm -rf build`",
    "cat <(rm -rf build)",
    "source ../outside/s.sh",
    ". ./not-there-yet.sh",
    "bash <<'EOF'\nrm -r ../outside\nEOF",
    "bash <<< 'rm -r ../outside'",
    "watch -n 1 rm -rf build",
    "trap 'rm -rf build' EXIT",
    "env -S 'rm -rf build'",
    "busybox rm -rf build",
    "echo X > .{.,}/f",
    "cp a.txt .?/b.txt",
    "tar -xf a.tar -C /etc",
    "curl -so /etc/motd https://example.com/x",
    "sed 's/a/b/w /etc/motd' a.txt",
    "perl -pi -e 's/a/b/' /etc/hosts",
    "chmod +x /usr/local/bin/tool",
    "echo X > /dev/null/../../etc/motd",
    'python3 -c "$CODE"',
    'echo "$(echo unbalanced"',
    "chroot / sh",
    "IFS=,; c=rm,-rf,build; $c",
    "X='rm -rf build'; $X",
    "T='a /etc/motd'; rm $T",
    "{rm,-rf,build}",
    "/bin/r? -rf build",
    "echo 'rm -rf build' | tee >(sh)",
    "echo 'rm -rf build' | (sh)",
    "coproc sh",
    "script -qc 'rm -rf build' /dev/null",
    "parallel rm -rf ::: build",
    "echo 'rm -rf build' | at now",
    "python3 -c \"print('x', file=open(p, m))\"",
    "python3 -c \"vars(shutil)['rmtree']('build')\"",
    'python3 -c "().__class__.__base__.__subclasses__()"',
    'perl -e \'&{"sys"."tem"}("ls")\'',
    "echo 'exec rm -rf build' | tclsh",
    "python3 -Ic \"import shutil; shutil.rmtree('build')\"",
    "python3 -W ignore -c 'import os; os.remove(\"a.txt\")'",
    "LD_PRELOAD=./hook.so ls",
    "env BASH_ENV=./hook.sh bash run.sh",
    "export PROMPT_COMMAND='rm -rf build'",
    "git -c core.pager='rm -rf build' log",
    "git -c alias.x='!rm -rf build' x",
    "git config --global core.hooksPath /tmp/hooks",
    "ssh localhost 'rm -rf build'",
    "docker run -v /:/host alpine rm -rf /host/etc",
    "source /dev/fd/0 <<< 'rm -rf build'",
    "ipython -c \"import os; os.system('rm -r build')\"",
    "gzip /etc/motd",
    "sort -o /etc/motd a.txt",
    "uniq a.txt /etc/motd",
    "uv run python -c \"import shutil; shutil.rmtree('build')\"",
    "poetry run rm -rf build",
]
# already caught by the old token screen; the parser must not lose them
KEPT = ["echo $((rm -rf build) )", "( (rm -rf build) )", "{ rm -rf build; }", "command rm -rf x"]

BENIGN = [
    "ls -la && git status",
    "cat README.md",
    "grep -rn TODO src/ | head -20",
    "git diff HEAD~1 -- src/",
    "git log --oneline | head -5",
    "git add -A && git commit -m 'fix: empty input'",
    "python3 script.py --out result.json",
    "python3 -m pytest -q tests/",
    "python3 -m json.tool data.json",
    'python3 -c "import sys; print(sys.version)"',
    'python3 -c \'import json; print(json.load(open("package.json"))["version"])\'',
    "python3 -c \"print('a-b'.replace('-', '_'))\"",
    "pip list",
    "pip install requests",
    "pip freeze > requirements.txt",
    "rm notes.txt",
    "rm -f build/*.o",
    "mkdir -p build/out && cp a.txt build/out/",
    "touch src/new.py && mv old.txt new.txt",
    "echo hello > out.txt 2>&1",
    "echo done >> log.txt",
    "wc -l *.py",
    "find . -name '*.py' | xargs grep -l TODO",
    "find . -name '*.pyc' -exec ls -l {} \\;",
    "sort data.txt | uniq -c | sort -rn",
    "tar -czf backup.tgz src/",
    "tar -xzf archive.tgz",
    "unzip -o pkg.zip -d vendor",
    "curl -s https://api.example.com/x | jq .name",
    "curl -sSL -o data.json https://example.com/data.json",
    "sed -n '1,20p' file.txt",
    "sed -i 's/foo/bar/g' src/main.py",
    "awk '{print $1}' access.log | sort | uniq -c",
    "awk -F, '$3 > 100 {print $1}' data.csv",
    "node -e 'console.log(1 + 2)'",
    "ruby -e 'puts 1 + 1'",
    "perl -ne 'print if /error/' log.txt",
    "npm install && npm test",
    "make -j2",
    "export FOO=bar && echo $FOO",
    "OUT=build/result.txt; echo x > $OUT",
    'for f in *.txt; do wc -l "$f"; done',
    "cd src && ls",
    "cd sub && python3 ../script.py > out.txt",
    "echo $(date) > stamp.txt",
    "ps aux | grep python",
    "command -v git",
    "cat <<'EOF' > notes.md\n# Notes\nrm -rf is dangerous; do not run it\nEOF",
    "timeout 10 python3 long.py",
    "if [ -f x.txt ]; then cat x.txt; else echo none; fi",
    "test -d build || mkdir build",
    "chmod +x run.sh && ./run.sh",
    "bash run.sh",
    ". .venv/bin/activate && pytest -q",
    "ls > /dev/null 2>&1",
    "base64 -d encoded.txt > decoded.bin",
    "echo aGk= | base64 -d",
    "nohup python3 server.py > server.log 2>&1 &",
    "cat /etc/os-release && uname -a",
    "X='a b'; echo \"$X\" > out.txt",
    "[ -f x.txt ] && echo yes",
    "python3 -c \"print(open('f', encoding='utf-8').read())\"",
    'python3 -c "print(__name__, __file__)"',
    "rm *.o",
    "python3 -W ignore script.py",
    "PYTHONPATH=src python3 -m pytest",
    "git -c user.name=bot commit -m wip",
    "docker run --rm alpine echo hi",
    "[[ $x == y* ]] && echo y",
    "gzip -k data.csv && sort data.csv > sorted.txt && zip out.zip sorted.txt",
    "uv run pytest -q",
    "(( $n > 3 )) && echo big; echo $(( (n + 1) * 2 ))",
    'while read line; do echo "$line" >> out.txt; done < in.txt',
]


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    root = tmp_path / "workspace"
    (root / "sub").mkdir(parents=True)
    (root / "run.sh").write_text("echo building\nmake -j2\n")
    (root / ".venv" / "bin").mkdir(parents=True)
    (root / ".venv" / "bin" / "activate").write_text(
        "deactivate () { unset VIRTUAL_ENV; hash -r 2>/dev/null; }\n"
        'VIRTUAL_ENV="/w/.venv"\nexport VIRTUAL_ENV\nPATH="$VIRTUAL_ENV/bin:$PATH"\nexport PATH\n'
    )
    return root


@pytest.mark.parametrize("command", BYPASSES + KEPT)
def test_a_wrapped_dangerous_command_asks(workspace: Path, command: str) -> None:
    assert dangerous_reason(command, workspace)


@pytest.mark.parametrize("command", BENIGN)
def test_an_ordinary_command_does_not_ask(workspace: Path, command: str) -> None:
    assert dangerous_reason(command, workspace) is None


def test_a_pattern_that_would_expand_to_options_asks(workspace: Path) -> None:
    assert dangerous_reason("rm *.txt", workspace) is None
    (workspace / "-rf").touch()  # `rm *` would run `rm -rf ...`
    assert dangerous_reason("rm *", workspace) == (
        "deletes by a pattern that can expand to options (a file named -...)"
    )


def test_a_sourced_script_is_screened_and_a_fifo_is_not_read(workspace: Path) -> None:
    (workspace / "clean.sh").write_text("cd ..\nrm -r outside\n")
    os.mkfifo(workspace / "pipe.sh")  # a read would block this worker forever
    assert dangerous_reason("source clean.sh", workspace) == "recursive delete (rm -r)"
    assert dangerous_reason("bash clean.sh", workspace) == "recursive delete (rm -r)"
    assert dangerous_reason(". pipe.sh", workspace) == "runs a script it cannot read (pipe.sh)"


TOO_MUCH = "nests commands too deeply or is too large to check"


@pytest.mark.parametrize(
    "command",
    [
        "echo " + "$(echo " * 10 + "x" + ")" * 10,
        "eval " * 10 + "ls",
        "nice " * 6000 + "ls",
        "xargs " * 5000 + "ls",
        "find . " + "-exec find . " * 2000,
        "source self.sh",
    ],
)
def test_the_screen_work_is_bounded_and_too_much_asks(workspace: Path, command: str) -> None:
    # the screen holds the GIL on a worker thread: hostile text must not pin it
    (workspace / "self.sh").write_text("source self.sh\n" * 10_000)
    assert dangerous_reason(command, workspace) == TOO_MUCH


@pytest.mark.parametrize("command", ["\\env.bash -c ls", "python3.x -c 1", "mkfs.ext4 x"])
def test_odd_command_names_get_a_verdict_not_a_fault(workspace: Path, command: str) -> None:
    reason = dangerous_reason(command, workspace)
    assert not (reason or "").startswith("could not be checked"), reason


def test_a_huge_command_line_asks_at_once(workspace: Path) -> None:
    # a quadratic pattern used to take about 50 s on 100 kB of "curl "
    assert dangerous_reason("curl " * 20_000, workspace) == "too long to check (100000 characters)"


def test_the_prompt_names_the_user_and_shows_the_command_as_it_is() -> None:
    event = MessageEvent.create(
        platform="slack",
        chat_type="thread",
        chat_id="C1",
        user_id="U1",
        message_id="1",
        text="x",
        thread_id="1",
        user_name="[al_ice](https://evil.example)\n*boss*",
    )
    assert who(event) == r"@\[al\_ice\]\(https://evil.example\) \*boss\*"
    shown = shown_action("ls\u202e; ```\n" + "x" * 2000)
    assert shown.startswith("ls\\u202e; '''\n")
    assert shown.endswith("[... 1409 more characters]") and "```" not in shown


# -- a shared Slack thread: only the user who asked answers ------------------------------


@pytest.fixture
def slack() -> Iterator[FakeSlack]:
    with FakeSlack() as fake:
        yield fake


async def test_in_a_shared_thread_only_the_asker_can_approve(
    tmp_path: Path, fake_llm: FakeOpenAI, slack: FakeSlack
) -> None:
    fake_llm.push(tool_calls(("terminal", {"command": "rm -rf build && echo removed"})))
    fake_llm.push(text("Cleaned up."))
    tools = {"enabled": ["terminal"], "terminal": {"approval": "dangerous"}}
    cfg = slack_config(
        tmp_path, fake_llm, slack, allowed_users=[ALICE, BOB], sections={"tools": tools}
    )
    build = cfg.workspace_path / "build"
    build.mkdir(parents=True)
    async with started(cfg) as (gw, _):
        top = slack.send_mention("<@U0BOT> clean the build", user=ALICE, channel="C1")
        thread = top["event"]["ts"]
        [prompt] = await answered(slack, "C1", thread_ts=thread)
        assert prompt.startswith(f"@{ALICE}'s command needs approval (recursive delete (rm -r))")
        assert "rm -rf build &amp;&amp; echo removed" in prompt
        for command in ("/approve", "/deny"):  # Bob shares the thread, not the command
            slack.send_message(command, user=BOB, channel="C1", thread_ts=thread)
        await answered(slack, "C1", 3, thread_ts=thread)
        assert build.exists() and len(gw.tool_host.pending) == 1
        slack.send_message("/approve", user=ALICE, channel="C1", thread_ts=thread)
        await answered(slack, "C1", 5, thread_ts=thread)
    refusal = (
        f"Only @{ALICE} can answer this approval request (@{ALICE}'s command); nothing changed."
    )
    assert texts(slack, "C1", thread)[1:] == [
        refusal,
        refusal,
        "Approved; running it.",
        "Cleaned up.",
    ]
    assert not build.exists()


# -- the real process: a wrapped delete does not run without approval --------------------


@pytest.mark.e2e
def test_the_daemon_does_not_run_a_wrapped_delete_unasked(
    tmp_path: Path, fake_llm: FakeOpenAI
) -> None:
    home = tmp_path / "home"
    keep = home / "outside" / "keep.txt"
    keep.parent.mkdir(parents=True)
    keep.write_text("precious")
    (home / "workspace").mkdir()
    commands: list[dict[str, Any]] = [
        {"command": "bash -c 'rm -r ../outside'"},
        {"command": "python3 -c \"import shutil; shutil.rmtree('../outside')\""},
        {"command": "echo cm0gLXIgLi4vb3V0c2lkZQ== | base64 -d | sh"},
    ]
    fake_llm.push(tool_calls(*[("terminal", c) for c in commands]), text("Could not."))
    tools = {"enabled": ["terminal"], "terminal": {"approval": "dangerous"}}
    model = {"base_url": fake_llm.base_url, "api_key": "sk-fake", "max_retries": 0}
    gateway = GatewayProcess(home, {"model": model, "tools": tools})
    try:
        gateway.start()
        reply = gateway.chat("tidy up next door")
        assert reply.status_code == 200, reply.text
    finally:
        gateway.kill()
    results = [m["content"] for m in fake_llm.requests[-1]["messages"] if m["role"] == "tool"]
    assert len(results) == 3
    assert all("needs the user's approval" in r for r in results), results
    assert keep.read_text() == "precious"


def test_relative_paths_are_judged_from_the_commands_workdir(workspace: Path) -> None:
    (workspace / "sub").mkdir(exist_ok=True)
    # from sub/, ../notes.txt is the workspace's own file; from the root it is outside
    assert dangerous_reason("echo x > ../notes.txt", workspace, workspace / "sub") is None
    assert dangerous_reason("echo x > ../notes.txt", workspace)
    assert dangerous_reason("echo x > ../../notes.txt", workspace, workspace / "sub")


def test_the_terminal_refuses_a_command_too_long_to_screen() -> None:
    from pydantic import ValidationError

    from tools.approval import MAX_COMMAND_CHARS
    from tools.terminal import TerminalArgs

    assert TerminalArgs(command="x" * MAX_COMMAND_CHARS).command
    with pytest.raises(ValidationError):
        TerminalArgs(command="x" * (MAX_COMMAND_CHARS + 1))
