"""What the approval screen knows about particular commands: which always ask, which delete,
write or change directory, and which run other commands that the screen must follow (wrappers,
shells, interpreters, ``find -exec``, ``xargs``, ``eval``, ``source``)."""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tools.shell_screen import Screen

DYN = "\x00"  # stands in for text only known when the command runs
INSIDE, OUTSIDE, UNKNOWN = "inside", "outside", "unknown"
NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_CLUSTER = re.compile(r"-[A-Za-z]+")


@dataclass(frozen=True, slots=True)
class Arg:
    """A word as far as the screen can expand it: `text` holds `DYN` where it cannot."""

    text: str
    raw: str
    glob: bool = False  # holds unquoted pattern or brace characters
    split: bool = False  # an unquoted expansion in it holds spaces: it becomes several words

    @property
    def dynamic(self) -> bool:
        return DYN in self.text


@dataclass(frozen=True, slots=True)
class Input:
    """A command's standard input: kind "" (none: the terminal gives none), "pipe", "here"
    (a here-document or here-string) or "file"; `decoded` when it is decoded hidden text."""

    kind: str
    file: Arg | None = None
    decoded: bool = False


NO_INPUT = Input("")
UNKNOWN_INPUT = Arg(DYN, "its input")
Handler = Callable[["Screen", str, list[Arg], Input], "str | None"]
COMMANDS: dict[str, Handler] = {}


def handles(*names: str) -> Callable[[Handler], Handler]:
    def register(handler: Handler) -> Handler:
        for name in names:
            COMMANDS[name] = handler
        return handler

    return register


ALWAYS = {
    "sudo": "runs as another user (sudo)",
    "su": "switches user (su)",
    "doas": "runs as another user (doas)",
    "pkexec": "runs as another user (pkexec)",
    "runuser": "runs as another user (runuser)",
    "mkfs": "formats a filesystem",
    "fdisk": "edits partitions",
    "parted": "edits partitions",
    "wipefs": "wipes filesystem signatures",
    "shred": "destroys file contents",
    "dd": "raw disk copy (dd)",
    "shutdown": "shuts the machine down",
    "reboot": "reboots the machine",
    "halt": "halts the machine",
    "poweroff": "powers the machine off",
    "killall": "kills processes by name",
    "pkill": "kills processes by pattern",
    "crontab": "changes scheduled jobs",
    "iptables": "changes the firewall",
    "nft": "changes the firewall",
    "useradd": "changes system users",
    "userdel": "changes system users",
    "usermod": "changes system users",
    "passwd": "changes a password",
    "mount": "mounts filesystems",
    "umount": "unmounts filesystems",
    "chattr": "changes file attributes",
    "chroot": "changes the root directory",
    "nsenter": "enters other namespaces",
    "modprobe": "loads kernel modules",
    "insmod": "loads kernel modules",
    "rmmod": "unloads kernel modules",
    "at": "schedules commands (at)",
    "batch": "schedules commands (batch)",
    "systemd-run": "runs a command as a system unit",
}


@handles(*ALWAYS)
def _always(screen: Screen, name: str, args: list[Arg], feed: Input) -> str | None:
    return ALWAYS[name.split(".")[0]]


def split(args: list[Arg]) -> tuple[list[str], list[Arg]]:
    """Options and positional arguments (an unknown word counts as positional)."""
    options: list[str] = []
    positional: list[Arg] = []
    for i, arg in enumerate(args):
        if arg.text == "--":
            return options, positional + args[i + 1 :]
        if arg.text.startswith("-") and len(arg.text) > 1 and not arg.dynamic:
            options.append(arg.text)
        else:
            positional.append(arg)
    return options, positional


def option_values(args: list[Arg], names: tuple[str, ...]) -> list[Arg]:
    """The values given to options `names` as ``-o X``, ``-oX`` or ``--output=X``."""
    out: list[Arg] = []
    for i, arg in enumerate(args):
        for name in names:
            cluster = len(name) == 2 and _CLUSTER.fullmatch(arg.text) is not None
            if (arg.text == name or (cluster and arg.text.endswith(name[1]))) and i + 1 < len(args):
                out.append(args[i + 1])  # -o X, or -so X: the last flag of a cluster takes X
            elif name.startswith("--") and arg.text.startswith(name + "="):
                out.append(Arg(arg.text.split("=", 1)[1], arg.raw, arg.glob))
            elif len(name) == 2 and arg.text.startswith(name) and len(arg.text) > 2:
                out.append(Arg(arg.text[2:], arg.raw, arg.glob))
    return out


@handles("rm", "unlink", "rmdir")
def _remove(screen: Screen, name: str, args: list[Arg], feed: Input) -> str | None:
    options, paths = split(args)
    flags = "".join(o for o in options if not o.startswith("--"))
    if name == "rm" and ("r" in flags or "R" in flags or "--recursive" in options):
        return "recursive delete (rm -r)"
    # `rm *` with a file named -rf here becomes `rm -rf ...`
    if any(a.glob and a.text[:1] in "*?[" for a in paths) and _dash_files(screen):
        return "deletes by a pattern that can expand to options (a file named -...)"
    for arg in paths:
        place = screen.place(arg)
        if place == OUTSIDE:
            return "deletes outside the workspace"
        if place == UNKNOWN:
            return f"deletes files only known when it runs ({arg.raw})"
    return None


def _dash_files(screen: Screen) -> bool:
    try:
        with os.scandir(screen.cwd or ".") as entries:
            return any(e.name.startswith("-") for e in entries)
    except OSError:
        return screen.cwd is None


# the compressors and converters replace the files they are given
_WRITERS = (
    "cp",
    "mv",
    "tee",
    "install",
    "ln",
    "rsync",
    "scp",
    "touch",
    "mkdir",
    "truncate",
    "patch",
    "mkfifo",
    "mknod",
    "gzip",
    "gunzip",
    "bzip2",
    "bunzip2",
    "xz",
    "unxz",
    "zstd",
    "dos2unix",
    "unix2dos",
)


@handles(*_WRITERS)
def _write(screen: Screen, name: str, args: list[Arg], feed: Input) -> str | None:
    for arg in split(args)[1]:
        if found := screen.writes(arg):
            return found
    return None


@handles("chmod", "chown", "chgrp")
def _permissions(screen: Screen, name: str, args: list[Arg], feed: Input) -> str | None:
    for arg in split(args)[1][1:]:
        if found := screen.writes(arg, "changes permissions"):
            return found
    return None


_SED_RUNS = re.compile(r"(^|[/;}\s\d$])[ewW](\s|;|$)")


@handles("sed", "gsed")
def _sed(screen: Screen, name: str, args: list[Arg], feed: Input) -> str | None:
    options, paths = split(args)
    scripts = option_values(args, ("-e", "--expression"))
    if not scripts and not option_values(args, ("-f", "--file")) and paths:
        scripts, paths = paths[:1], paths[1:]
    for script in scripts:
        if script.dynamic or _SED_RUNS.search(script.text):
            return f"a sed script that runs commands or writes files ({script.raw[:40]})"
    if any(o.startswith(("-i", "--in-place")) for o in options):
        for arg in paths:
            if found := screen.writes(arg):
                return found
    return None


@handles("find")
def _find(screen: Screen, name: str, args: list[Arg], feed: Input) -> str | None:
    roots = 0
    while roots < len(args) and not args[roots].text.startswith(("-", "(", "!")):
        roots += 1
    base = (args[0].text if roots else ".").rstrip("/") + "/x"  # what {} stands for
    i = roots
    while i < len(args):
        word = args[i].text
        if word == "-delete":
            return "deletes what find finds (find -delete)"
        writes = word in ("-fprint", "-fprint0", "-fls", "-fprintf") and i + 1 < len(args)
        if writes and (found := screen.writes(args[i + 1])):
            return found
        if word in ("-exec", "-execdir", "-ok", "-okdir"):
            end = i + 1
            while end < len(args) and args[end].text not in (";", "+"):
                end += 1
            run = [Arg(a.text.replace("{}", base), a.raw, a.glob) for a in args[i + 1 : end]]
            if found := screen.child().command(run, NO_INPUT):
                return found
            i = end
        i += 1
    return None


_XARGS_VALUES = frozenset(
    {
        "-n",
        "-P",
        "-L",
        "-d",
        "-s",
        "-E",
        "-a",
        "--arg-file",
        "--delimiter",
        "--max-args",
        "--max-procs",
        "--max-lines",
    }
)


@handles("xargs", "parallel")
def _xargs(screen: Screen, name: str, args: list[Arg], feed: Input) -> str | None:
    i, replace = 0, ""
    while i < len(args) and args[i].text.startswith("-") and not args[i].dynamic:
        word = args[i].text
        if word == "--":
            i += 1
            break
        if word in ("-I", "--replace") and i + 1 < len(args):
            replace, i = args[i + 1].text, i + 2
            continue
        if word.startswith(("-I", "-i", "--replace")):
            replace = word.split("=", 1)[1] if "=" in word else word[2:] or "{}"
        i += 2 if word in _XARGS_VALUES else 1
    run = args[i:]
    if name == "parallel" and ":::" in [a.text for a in run]:
        run = run[: [a.text for a in run].index(":::")]
    if not run:
        return None
    if replace:
        run = [Arg(a.text.replace(replace, DYN), a.raw, a.glob) for a in run]
    else:
        run = [*run, UNKNOWN_INPUT]
    return screen.child().command(run, NO_INPUT)


_WRAPPERS: dict[str, tuple[frozenset[str], int]] = {
    "env": (frozenset({"-u", "--unset"}), 0),
    "nice": (frozenset({"-n", "--adjustment"}), 0),
    "nohup": (frozenset(), 0),
    "time": (frozenset({"-f", "-o"}), 0),
    "command": (frozenset(), 0),
    "builtin": (frozenset(), 0),
    "exec": (frozenset({"-a"}), 0),
    "stdbuf": (frozenset({"-i", "-o", "-e"}), 0),
    "setsid": (frozenset(), 0),
    "timeout": (frozenset({"-s", "--signal", "-k", "--kill-after"}), 1),
    "ionice": (frozenset({"-c", "-n", "-p", "-P", "-u"}), 0),
    "chrt": (frozenset(), 1),
    "taskset": (frozenset(), 1),
    "unbuffer": (frozenset(), 0),
    "chronic": (frozenset(), 0),
    "flock": (frozenset({"-w", "-E", "--timeout", "--conflict-exit-code"}), 1),
    "faketime": (frozenset({"-f"}), 1),
    "busybox": (frozenset(), 0),
    "toybox": (frozenset(), 0),
    "watch": (frozenset({"-n", "--interval", "-d"}), 0),
    "script": (frozenset({"-T", "-I", "-O", "-B", "-E", "-o"}), 0),
    "strace": (frozenset({"-e", "-p", "-s", "-u", "-o"}), 0),
    "ltrace": (frozenset({"-e", "-p", "-s", "-u", "-o"}), 0),
}


@handles(*_WRAPPERS)
def _wrapper(screen: Screen, name: str, args: list[Arg], feed: Input) -> str | None:
    values, skip = _WRAPPERS[name]
    inner, i = screen.child(), 0
    while i < len(args) and not args[i].dynamic:
        word = args[i].text
        if word == "--":
            i += 1
            break
        if name == "env" and "=" in word and not word.startswith("-"):
            if found := inner.assign(*word.split("=", 1)):  # NAME=value for the command
                return found
            i += 1
            continue
        if not word.startswith("-") or word == "-":
            break
        if (name, word) in (("command", "-v"), ("command", "-V")):
            return None  # looks a command up, runs nothing
        code = option_values(args[i : i + 2], ("-S", "--split-string", "-c", "--command"))
        if code and name in ("env", "flock", "script"):
            rest = " ".join(a.text for a in code + args[i + 2 :])
            return screen_text(inner, rest, f"{name} {word}")
        if chdir := option_values(args[i : i + 2], ("-C", "--chdir")):
            inner.cwd = None if chdir[0].dynamic else os.path.join(inner.cwd or "", chdir[0].text)
        i += 2 if word in values or word in ("-C", "--chdir") else 1
    run = args[i + skip :]
    if name == "watch":  # its arguments are one shell command line
        return screen_text(inner, " ".join(a.text for a in run), "watch")
    return inner.command(run, feed)


def screen_text(screen: Screen, text: str, what: str) -> str | None:
    if DYN in text:
        return f"runs shell code only known when it runs ({what})"
    return screen.child().script(text)
