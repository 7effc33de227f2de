"""Which shell commands need the user's approval, and asking for it.

`dangerous_reason` is a screen, not a sandbox: a few whole-line patterns, then a walk of what the
shell will run (`tools.shell_screen`), which asks whenever it cannot tell (docs/approvals.md).
`tools.terminal.approval: always` asks for every command.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Callable
from pathlib import Path

from tools.host import ApprovalRequest, ToolHost
from tools.shell_screen import Screen

# Patterns scan a bounded distance from each match start: the screen runs holding the GIL, and an
# unbounded `.*` after a repeated word is quadratic (100 kB of "curl " took 50 s)
MAX_COMMAND_CHARS = 32_000
_PATTERNS = [
    (re.compile(r":\(\)\s*\{\s*:\|:&\s*\};\s*:"), "fork bomb"),
    (
        re.compile(r"\b(curl|wget)\b[^|;&]{0,300}\|\s{0,9}(sudo\s+)?(ba|z|da|k)?sh\b"),
        "pipes a download into a shell",
    ),
    (
        re.compile(r"\b(curl|wget)\b[^|;&]{0,300}\|\s{0,9}(sudo\s+)?(python3?|perl|ruby)\b"),
        "pipes a download into an interpreter",
    ),
    (
        re.compile(r"\bgit\s+push\b[^\n;&|]{0,300}(\s--force\b|\s-f\b|\s--force-with-lease\b)"),
        "force-pushes",
    ),
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
CANNOT_ASK = (
    "this command needs the user's approval, and this chat cannot ask for it; "
    "tell the user what you wanted to run and why"
)


def dangerous_reason(command: str, workspace: Path, cwd: Path | None = None) -> str | None:
    """Why ``command`` needs approval, or None when it looks harmless; relative paths are
    judged from ``cwd`` (the workspace root by default). It reads files (a sourced script),
    so it runs on a worker thread, never the event loop."""
    if len(command) > MAX_COMMAND_CHARS:
        return f"too long to check ({len(command)} characters)"
    for pattern, reason in _PATTERNS:
        if pattern.search(command):
            return reason
    try:
        screen = Screen(workspace.resolve())
        if cwd is not None:
            screen.cwd = screen.env["PWD"] = str(cwd.resolve())
        return screen.script(command)
    except Exception as exc:  # a fault in the screen must fail closed: ask
        return f"could not be checked ({type(exc).__name__})"


# Programs that only read (with no option that writes or runs another program): what runs
# unasked where the kernel offers no wall to stop a write.
_READERS = frozenset(
    {
        *("cat", "head", "tail", "grep", "egrep", "fgrep", "rg", "wc", "ls", "pwd", "echo"),
        *("printf", "stat", "file", "du", "df", "date", "whoami", "id", "uname", "printenv"),
        *("which", "type", "true", "false", "basename", "dirname", "realpath", "readlink"),
        *("cut", "tr", "uniq", "nl", "od", "hexdump", "md5sum", "sha1sum", "sha256sum", "cmp"),
        *("diff", "comm", "column", "jq", "tree", "env", "test", "find", "sort"),
    }
)
# options that write a file or run a program (find -exec, sort -o / --compress-program, ...)
_WRITING_OPTIONS = re.compile(
    r"^(-o|--output|-exec|-ok|-delete|-fprint|-fls|--to-command|--compress-program|--pre)"
)
# redirections, substitutions, expansions, globs, escapes, history, line breaks
_SPECIAL = frozenset("<>`$(){}[]*?~!\\\n\r")
_GIT_READS = frozenset(
    {"status", "log", "diff", "show", "branch", "rev-parse", "ls-files", "blame"}
)
UNWALLED = (
    "this machine cannot wall tool processes in (no Landlock), so only commands known to be "
    "read-only run without asking"
)


def read_only(command: str) -> bool:
    """True only for a command made of known readers joined by pipes, `&&`, `||` or `;`, with
    no redirection, substitution, expansion or option that writes: the commands that may run
    unasked where no wall stops a write. Anything else is False (ask)."""
    if len(command) > 2000 or any(c in _SPECIAL for c in command):
        return False
    try:
        lexer = shlex.shlex(command, posix=True, punctuation_chars="|;&")
        lexer.whitespace_split = True
        tokens = list(lexer)
    except ValueError:
        return False
    words: list[str] = []
    for token in [*tokens, ";"]:
        if token in ("|", "||", "&&", ";"):
            if not words or not _reads(words):
                return False
            words = []
        elif token and set(token) <= set("|;&"):
            return False  # & (background) or an odd run of separators
        else:
            words.append(token)
    return True


def _reads(words: list[str]) -> bool:
    name = words[0].rsplit("/", 1)[-1]
    if name == "git":
        return len(words) > 1 and words[1] in _GIT_READS and "--output" not in " ".join(words)
    if name == "env" and len(words) > 1:
        return False  # env runs the program named after it
    return name in _READERS and not any(_WRITING_OPTIONS.match(w) for w in words[1:])


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
