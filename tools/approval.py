"""Which shell commands need the user's approval, and asking for it.

`dangerous_reason` is a screen, not a sandbox: it catches the common destructive shapes
(recursive deletes, privilege escalation, piping downloads into a shell, disk tools, writes
outside the workspace). `tools.terminal.approval: always` asks for every command.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Callable
from pathlib import Path

from tools.host import ApprovalRequest, ToolHost

_SEPARATORS = frozenset({";", "&&", "||", "|", "&", "|&", "\n", "(", ")", "{", "}", "!"})
_WRAPPERS = frozenset({"env", "nice", "nohup", "time", "timeout", "xargs", "command", "exec"})
_ALWAYS = {
    "sudo": "runs as another user (sudo)",
    "su": "switches user (su)",
    "doas": "runs as another user (doas)",
    "pkexec": "runs as another user (pkexec)",
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
    "useradd": "changes system users",
    "userdel": "changes system users",
    "passwd": "changes a password",
}
_WRITERS = frozenset({"cp", "mv", "tee", "install", "ln", "rsync", "touch", "mkdir", "truncate"})
_PATTERNS = [
    (re.compile(r":\(\)\s*\{\s*:\|:&\s*\};\s*:"), "fork bomb"),
    (
        re.compile(r"\b(curl|wget)\b[^|;&]*\|\s*(sudo\s+)?(ba|z|da|k)?sh\b"),
        "pipes a download into a shell",
    ),
    (
        re.compile(r"\b(curl|wget)\b[^|;&]*\|\s*(sudo\s+)?(python3?|perl|ruby)\b"),
        "pipes a download into an interpreter",
    ),
    (re.compile(r"\bgit\s+push\b.*(\s--force\b|\s-f\b|\s--force-with-lease\b)"), "force-pushes"),
    (re.compile(r"\bgit\s+(reset\s+--hard|clean\s+-[a-zA-Z]*f)"), "discards work in git"),
    (re.compile(r"\bkill\s+(-9\s+|-KILL\s+|-s\s+KILL\s+)?-1\b"), "kills every process"),
    (re.compile(r"\bchmod\s+(-[a-zA-Z]*R[a-zA-Z]*\s+)?[0-7]*777\b"), "makes files world-writable"),
    (
        re.compile(r"\b(chmod|chown|chgrp)\s+(-[a-zA-Z]*R|--recursive)\b"),
        "recursive permission change",
    ),
    (
        re.compile(r"\bsystemctl\s+(stop|disable|mask|kill|poweroff|reboot|halt)\b"),
        "stops system services",
    ),
    (re.compile(r">\s*/dev/(sd|nvme|hd|vd|xvd|mmcblk)"), "writes to a disk device"),
]
_SAFE_TARGETS = ("/dev/null", "/dev/stdout", "/dev/stderr", "/dev/tty")
CANNOT_ASK = (
    "this command needs the user's approval, and this chat cannot ask for it; "
    "tell the user what you wanted to run and why"
)


def dangerous_reason(command: str, workspace: Path) -> str | None:
    """Why ``command`` needs approval, or None when it looks harmless."""
    for pattern, reason in _PATTERNS:
        if pattern.search(command):
            return reason
    try:
        lexer = shlex.shlex(command, posix=True, punctuation_chars=True)
        lexer.whitespace_split = True
        tokens = list(lexer)
    except ValueError:
        return "cannot be parsed safely (unbalanced quotes)"
    root = workspace.resolve()
    for words in _segments(tokens):
        found = _segment_reason(words, root)
        if found:
            return found
    return None


def _segments(tokens: list[str]) -> list[list[str]]:
    out: list[list[str]] = [[]]
    for token in tokens:
        if token in _SEPARATORS or set(token) <= set(";&|()"):
            out.append([])
        else:
            out[-1].append(token)
    return [words for words in out if words]


def _segment_reason(words: list[str], root: Path) -> str | None:
    for i, word in enumerate(words):
        redirect = word in (">", ">>", ">|", "&>", "&>>") and i + 1 < len(words)
        if redirect and _outside(words[i + 1], root):
            return f"writes outside the workspace ({words[i + 1]})"
    args = [w for w in words if not re.match(r"^[A-Za-z_][A-Za-z0-9_]*=", w)]
    while args and args[0].rsplit("/", 1)[-1] in _WRAPPERS:
        args = args[1:]
        while args and args[0].startswith("-"):
            args = args[1:]
    if not args:
        return None
    name = args[0].rsplit("/", 1)[-1]
    base = name.split(".")[0]  # mkfs.ext4
    if base in _ALWAYS:
        return _ALWAYS[base]
    if name == "rm":
        flags = "".join(a for a in args[1:] if a.startswith("-") and not a.startswith("--"))
        if "r" in flags or "R" in flags or "--recursive" in args:
            return "recursive delete (rm -r)"
        if any(_outside(a, root) for a in args[1:] if not a.startswith("-")):
            return "deletes outside the workspace"
    if name in _WRITERS or (name == "sed" and any(a.startswith("-i") for a in args)):
        targets = [a for a in args[1:] if not a.startswith("-")]
        for target in targets:
            if _outside(target, root):
                return f"writes outside the workspace ({target})"
    return None


def _outside(target: str, root: Path) -> bool:
    """True when a path argument lands outside the workspace (commands run in it)."""
    if target.startswith(_SAFE_TARGETS) or target.startswith("&"):
        return False
    if not (target.startswith(("/", "~")) or ".." in target.split("/")):
        return False
    if target.startswith("~"):
        return True
    path = Path(target) if target.startswith("/") else root / target
    try:
        resolved = path.resolve()
    except (OSError, RuntimeError):
        return True
    return resolved != root and root not in resolved.parents


def approve(
    host: ToolHost,
    request: ApprovalRequest,
    should_stop: Callable[[], bool],
) -> str | None:
    """None when approved; else the reason it was not, for the observation. The host may
    raise `ToolError` itself (e.g. `CANNOT_ASK` when the chat has no way to ask)."""
    if host.ask_approval is None:
        return CANNOT_ASK
    if host.ask_approval(request, should_stop):
        return None
    if should_stop():
        return "not run: the user interrupted this turn"
    return "the user did not approve this command (denied or no answer in time)"
