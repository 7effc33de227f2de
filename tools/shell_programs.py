"""The approval screen's programs with their own ways to write or run commands: download and
archive tools' output options, ``git -c``/``git config --global``, ``ssh HOST CMD`` and
containers given host access."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from tools.shell_commands import Arg, Input, handles, option_values, split

if TYPE_CHECKING:
    from tools.shell_screen import Screen

_OUTPUTS = {
    "curl": ("-o", "--output", "--output-dir"),
    "wget": ("-O", "--output-document", "-P", "--directory-prefix", "-o", "--output-file"),
    "unzip": ("-d",),
    "tar": ("-C", "--directory"),
    "sort": ("-o", "--output"),
}


@handles(*_OUTPUTS)
def _output_option(screen: Screen, name: str, args: list[Arg], feed: Input) -> str | None:
    if name == "tar" and not any(
        a.text in ("--extract", "--get") or (not a.text.startswith("--") and "x" in a.text)
        for a in args[:1] + [a for a in args if a.text.startswith("-")]
    ):
        return None  # -C only says where to read from when tar creates or lists
    for arg in option_values(args, _OUTPUTS[name]):
        if found := screen.writes(arg):
            return found
    return None


# git options whose value is a command git runs
_GIT_RUNS = re.compile(
    r"(alias\.[^=]*=\s*!|core\.(pager|editor|sshcommand|fsmonitor|hookspath|askpass)=|"
    r"[^=]*\.(command|cmd|program|helper|textconv|clean|smudge|process)=|sequence\.editor=)",
    re.IGNORECASE,
)


@handles("git")
def _git(screen: Screen, name: str, args: list[Arg], feed: Input) -> str | None:
    for value in option_values(args, ("-c",)):
        if value.dynamic or _GIT_RUNS.match(value.text):
            return f"sets a git option that runs a command ({value.raw[:60]})"
    words = [a.text for a in args]
    if "config" in words and ({"--global", "--system"} & set(words)):
        return "changes git configuration outside the workspace"
    return None


_SSH_VALUES = frozenset(
    {
        "-b",
        "-c",
        "-D",
        "-E",
        "-e",
        "-F",
        "-I",
        "-i",
        "-J",
        "-L",
        "-l",
        "-m",
        "-O",
        "-o",
        "-p",
        "-Q",
        "-R",
        "-S",
        "-W",
        "-w",
    }
)


@handles("ssh")
def _ssh(screen: Screen, name: str, args: list[Arg], feed: Input) -> str | None:
    i = 0
    while i < len(args) and args[i].text.startswith("-"):
        i += 2 if args[i].text in _SSH_VALUES else 1
    remote = args[i + 1 :]  # after the host: a command line for the remote shell
    if not remote:
        return None
    text = " ".join(a.text for a in remote)
    inner = screen.child()
    inner.cwd = "~"  # the remote home: may be this machine's
    return (
        "runs a remote command only known when it runs" if remote[0].dynamic else inner.script(text)
    )


_HOST_ACCESS = re.compile(
    r"(-v|--volume|--mount|--privileged|--pid|--net|--network|--cap-add|"
    r"--device|--userns|--ipc|--uts)(=|$)|-v.+"
)


@handles("docker", "podman", "nerdctl")
def _container(screen: Screen, name: str, args: list[Arg], feed: Input) -> str | None:
    words = split(args)[1][:1]
    if not words or words[0].text not in ("run", "create", "exec"):
        return None
    for arg in args:
        if _HOST_ACCESS.match(arg.text):
            return f"runs a container with access to the host ({arg.raw})"
    return None


@handles("uniq", "zip")
def _named_output(screen: Screen, name: str, args: list[Arg], feed: Input) -> str | None:
    paths = split(args)[1]
    target = paths[1:2] if name == "uniq" else paths[:1]  # uniq IN OUT; zip ARCHIVE FILES
    return screen.writes(target[0]) if target else None


_RUNNERS = ("uv", "poetry", "pipenv", "pdm", "hatch", "rye", "conda", "pixi")


@handles(*_RUNNERS)
def _runner(screen: Screen, name: str, args: list[Arg], feed: Input) -> str | None:
    """``uv run CMD``, ``poetry run CMD``, ...: the command they run is screened."""
    positional = split(args)[1]
    if not positional or positional[0].text != "run":
        return None
    rest = args[args.index(positional[0]) + 1 :]
    while rest and rest[0].text.startswith("-") and rest[0].text != "--":
        rest = rest[1:]  # their own options (a value taken by one may be screened as a name)
    return screen.child().command(rest[1:] if rest and rest[0].text == "--" else rest, feed)
