"""The approval screen's walk over a command line: each simple command `tools.shell_parse` finds,
with the variables and working directory it can follow, into wrappers (``bash -c``, ``env``,
``xargs``, ``find -exec``, ``eval``, ``source``, inline interpreter code). What it cannot follow
(a value only known at run time that decides what runs or where it writes) asks."""

from __future__ import annotations

import os
import re
import stat
from pathlib import Path

import tools.shell_code
import tools.shell_programs
import tools.shell_state  # noqa: F401  (registers its handlers)
from tools.inline_code import family
from tools.shell_commands import COMMANDS, DYN, INSIDE, OUTSIDE, UNKNOWN, Arg, Handler, Input
from tools.shell_parse import ParseError, Segment, Word, parse

MAX_DEPTH = 6
# the screen holds the GIL: whatever the text (sourced files included), its work is bounded
MAX_CHARS = 1_000_000
MAX_COMMANDS = 20_000
MAX_VALUE = 4096  # a longer variable value counts as unknown (``A=$A$A`` doubles each time)
MAX_SCRIPT_BYTES = 256 * 1024
# variables that make a shell, the dynamic linker, git or an interpreter run other code
RUNS_CODE = frozenset(
    [
        "LD_PRELOAD",
        "LD_AUDIT",
        "BASH_ENV",
        "ENV",
        "PROMPT_COMMAND",
        "PS4",
        "SHELLOPTS",
        "BASHOPTS",
        "PERL5OPT",
        "NODE_OPTIONS",
        "RUBYOPT",
        "PYTHONSTARTUP",
        "GIT_SSH",
        "GIT_SSH_COMMAND",
        "GIT_EXTERNAL_DIFF",
        "GIT_PAGER",
        "GIT_EDITOR",
        "GIT_ASKPASS",
        "GIT_CONFIG_GLOBAL",
        "PAGER",
        "EDITOR",
        "VISUAL",
        "LESSOPEN",
        "MANPAGER",
    ]
)
TOO_MUCH = "nests commands too deeply or is too large to check"
_ASSIGNMENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\[[^]]*\])?\+?=")
_SAFE_TARGET = re.compile(r"/dev/(null|stdout|stderr|tty|fd/[0-9]+)")
_WRITE_REDIRECTS = frozenset({">", ">>", ">|", "&>", "&>>", ">&", "<>"})
_DECODERS = re.compile(
    r"(base64|base32|basenc|base58)\s.*(-d|--decode|-D)\b|xxd\s.*-r|uudecode|"
    r"openssl\s.*-d\b|rev\b"
)


class Screen:
    """One level of the walk; wrappers and substitutions are screened by a `child`."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.depth = 0
        self.env = {"HOME": "~", "PWD": str(root)}
        self.cwd: str | None = str(root)  # None: not known
        self.decoding = False  # the previous command decodes hidden text
        self.budget = [MAX_CHARS, MAX_COMMANDS]  # shared by every child

    def child(self) -> Screen:
        screen = Screen(self.root)
        screen.depth, screen.env, screen.cwd = self.depth + 1, dict(self.env), self.cwd
        screen.budget = self.budget
        return screen

    def assign(self, name: str, value: str) -> str | None:
        """Record a variable; why it needs approval when it makes programs run code."""
        self.env[name] = value if len(value) <= MAX_VALUE else DYN
        if name in RUNS_CODE:
            return f"sets {name}, which makes programs run other code"
        return None

    def spent(self, chars: int, commands: int) -> bool:
        """Charge the shared budget; True once it is exhausted (or nesting too deep)."""
        self.budget[0] -= chars
        self.budget[1] -= commands
        return self.budget[0] < 0 or self.budget[1] < 0 or self.depth > MAX_DEPTH

    def script(self, text: str) -> str | None:
        """Why a command line needs approval, or None."""
        if self.spent(len(text), 0):
            return TOO_MUCH
        try:
            parsed = parse(text)
        except ParseError as exc:
            return f"cannot be parsed safely ({exc})"
        for body in parsed.substitutions:
            if found := self.child().script(body):
                return found
        for seg in parsed.segments:
            if found := self.segment(seg):
                return found
        return None

    def segment(self, seg: Segment) -> str | None:
        decoded = seg.piped and self.decoding
        self.decoding = bool(_DECODERS.match(" ".join(w.raw for w in seg.words) + " "))
        feed = Input("pipe" if seg.piped else "here" if seg.heredoc else "", None, decoded)
        for op, word in seg.redirects:
            target = self.arg(word)
            if op in _WRITE_REDIRECTS and not (op == ">&" and re.fullmatch(r"\d+|-", word.raw)):
                if found := self.writes(target):
                    return found
            elif op == "<" and not feed.kind:
                feed = Input("file", target, decoded)
        args = [self.arg(w) for w in seg.words]
        while args and _ASSIGNMENT.match(args[0].text):
            name, _, value = args.pop(0).text.partition("=")
            if found := self.assign(name.rstrip("+").split("[")[0], value):
                return found
        # an unquoted $X is split into words: X="rm -rf d"; $X runs rm
        words = [
            Arg(w, a.raw, a.glob) for a in args for w in (a.text.split() if a.split else [a.text])
        ]
        return self.command(words, feed)

    def command(self, args: list[Arg], feed: Input) -> str | None:
        if self.spent(0, 1):
            return TOO_MUCH
        while args and args[0].text in _KEYWORDS:
            if args[0].text == "coproc":  # its input is a pipe the script writes to
                feed = Input("pipe")
            args = args[1:]
        if not args:
            return None
        head = args[0]
        if head.dynamic or (head.glob and head.text not in ("[", "[[")):
            return f"runs a command only known when it runs ({head.raw})"
        name = head.text.rsplit("/", 1)[-1]
        if feed.decoded and name not in _SAFE_SINKS:
            return f"runs decoded hidden text ({name})"
        key = name if name in COMMANDS else name.split(".")[0]  # mkfs.ext4 is mkfs
        handler: Handler | None = COMMANDS.get(key)
        if handler is None and family(name):
            handler, key = COMMANDS["<interpreter>"], name
        return handler(self, key, args[1:], feed) if handler else None

    def arg(self, word: Word) -> Arg:
        out: list[str] = []
        glob = split = False
        for part in word.parts:
            if part.kind == "bare":
                glob = glob or any(c in part.text for c in "*?[") or _brace(part.text)
                out.append(part.text)
            elif part.kind == "quoted":
                out.append(part.text)
            elif part.kind == "qvar":
                out.append(self.env.get(part.text, DYN))
            elif part.kind == "var" and "IFS" not in self.env:
                value = self.env.get(part.text, DYN)
                split = split or any(c.isspace() for c in value)
                glob = glob or any(c in value for c in "*?[")
                out.append(value)
            else:
                out.append(DYN)  # with IFS changed, even the splitting is unknown
        return Arg("".join(out), word.raw, glob, split)

    def place(self, arg: Arg) -> str:
        """Where a path argument lands: INSIDE the workspace, OUTSIDE it, or UNKNOWN."""
        text = arg.text
        if _SAFE_TARGET.fullmatch(text) or text.startswith("&"):
            return INSIDE
        if arg.dynamic or (arg.glob and _may_climb(text)):
            return UNKNOWN
        if text.startswith("~"):
            return OUTSIDE
        if text.startswith("/"):
            path = Path(text)
        elif self.cwd is None:
            return UNKNOWN
        elif self.cwd.startswith("~"):
            return OUTSIDE
        else:
            path = Path(self.cwd) / text
        try:
            resolved = path.resolve()
        except (OSError, RuntimeError):
            return OUTSIDE
        inside = resolved == self.root or self.root in resolved.parents
        return INSIDE if inside else OUTSIDE

    def writes(self, arg: Arg, verb: str = "writes") -> str | None:
        place = self.place(arg)
        if place == OUTSIDE:
            return f"{verb} outside the workspace ({arg.raw})"
        if place == UNKNOWN:
            return f"cannot tell where it {verb.split()[0]} ({arg.raw})"
        return None

    def run_file(self, arg: Arg) -> str | None:
        """A script the shell will read as commands (``source f``, ``bash f``): screened."""
        if self.place(arg) != INSIDE or arg.text.startswith("/dev/"):  # /dev/stdin, /dev/fd/N
            return f"runs a script from outside the workspace or unknown ({arg.raw})"
        path = arg.text if arg.text.startswith("/") else os.path.join(self.cwd or "", arg.text)
        try:
            # non-blocking: a FIFO must not pin this worker; then only a regular file is read
            fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
        except OSError:
            return f"runs a script it cannot read ({arg.raw})"
        try:
            info = os.fstat(fd)
            if not stat.S_ISREG(info.st_mode) or info.st_size > MAX_SCRIPT_BYTES:
                return f"runs a script it cannot read ({arg.raw})"
            data = os.read(fd, MAX_SCRIPT_BYTES + 1)
        finally:
            os.close(fd)
        return self.child().script(data.decode("utf-8", "replace"))


def _brace(text: str) -> bool:
    return "{" in text and ("," in text or ".." in text)


def _may_climb(text: str) -> bool:
    """A pattern or brace expansion that could become ``..`` or an absolute path."""
    if _brace(text):
        return True
    return any(c[:1] in (".", "[", "?") for c in text.split("/") if any(x in c for x in "*?["))


_KEYWORDS = frozenset(
    {
        "!",
        "{",
        "}",
        "if",
        "then",
        "else",
        "elif",
        "fi",
        "do",
        "done",
        "while",
        "until",
        "esac",
        "function",
        "coproc",
    }
)
_SAFE_SINKS = frozenset(
    {
        "cat",
        "head",
        "tail",
        "less",
        "more",
        "wc",
        "grep",
        "od",
        "hexdump",
        "file",
        "sha256sum",
        "sha1sum",
        "md5sum",
        "jq",
        "sort",
        "tr",
        "cut",
        "strings",
        "diff",
        "cmp",
        "tee",
        "xxd",
        "uniq",
        "gunzip",
        "gzip",
        "zcat",
        "tar",
    }
)
