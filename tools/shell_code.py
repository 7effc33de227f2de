"""The approval screen's commands that run code: shells (``bash -c``, ``sh FILE``, ``| sh``),
interpreters (``python3 -c``, ``perl -e``, ``node -e``, ``awk``, ``| python3``), ``eval``,
``source``, ``trap`` and ``alias``."""

from __future__ import annotations

from typing import TYPE_CHECKING

from tools.inline_code import CODE_FLAGS, code_reason, family
from tools.shell_commands import Arg, Input, handles, screen_text, split

if TYPE_CHECKING:
    from tools.shell_screen import Screen

SHELLS = ("sh", "bash", "zsh", "dash", "ksh", "ash", "mksh", "yash", "fish", "rbash")


@handles(*SHELLS)
def _shell(screen: Screen, name: str, args: list[Arg], feed: Input) -> str | None:
    i = 0
    while i < len(args):
        arg = args[i]
        if arg.dynamic:
            return f"runs a shell with arguments only known when it runs ({arg.raw})"
        if arg.text in ("--", "-"):
            i += 1
            break
        if not arg.text.startswith(("-", "+")):
            break
        letters = "" if arg.text.startswith("--") else arg.text[1:]
        if "c" in letters:
            if i + 1 >= len(args):
                return None
            return screen_text(screen, args[i + 1].text, f"{name} -c {args[i + 1].raw[:40]}")
        bound = "o" in letters or "O" in letters or arg.text in ("--rcfile", "--init-file")
        i += 2 if bound else 1
    if i < len(args):
        return screen.run_file(args[i])
    if feed.kind == "pipe":
        return f"pipes commands into a shell ({name})"
    if feed.kind == "here":
        return f"feeds a here-document to a shell ({name})"
    if feed.kind == "file" and feed.file is not None:
        return screen.run_file(feed.file)
    return None


@handles("source", ".")
def _source(screen: Screen, name: str, args: list[Arg], feed: Input) -> str | None:
    return screen.run_file(args[0]) if args else None


@handles("eval")
def _eval(screen: Screen, name: str, args: list[Arg], feed: Input) -> str | None:
    return screen_text(screen, " ".join(a.text for a in args), "eval")


@handles("trap")
def _trap(screen: Screen, name: str, args: list[Arg], feed: Input) -> str | None:
    code = split(args)[1]
    return screen_text(screen, code[0].text, "trap") if code else None


@handles("alias")
def _alias(screen: Screen, name: str, args: list[Arg], feed: Input) -> str | None:
    for arg in args:
        if "=" in arg.text and (found := screen_text(screen, arg.text.split("=", 1)[1], name)):
            return found
    return None


_INTERPRETER_VALUES = frozenset({"-W", "-X", "-r", "--require", "-I", "--import", "-M", "-x"})


@handles("<interpreter>")
def _interpreter(screen: Screen, name: str, args: list[Arg], feed: Input) -> str | None:
    fam = family(name) or "python"
    if fam == "awk":
        return _awk(screen, name, args)
    flags = CODE_FLAGS.get(fam, ())
    inplace, ran_code, i = False, False, 0
    while i < len(args):
        arg, word = args[i], args[i].text
        if arg.dynamic:
            return f"runs {name} with arguments only known when it runs ({arg.raw})"
        if word == "--" or not word.startswith("-") or word == "-":
            break
        cluster = fam in ("perl", "ruby") and not word.startswith("--")
        inplace = inplace or (cluster and "i" in word[1:])
        letter, attached = _python_cluster(word) if fam == "python" else ("", "")
        if letter == "m":
            return None  # a module, like a script
        code = None
        if letter == "c" and attached:
            code, i = Arg(attached, arg.raw), i + 1
        elif letter == "c" or word in flags or (cluster and word[-1] in "eE"):
            code = args[i + 1] if i + 1 < len(args) else Arg("", "")
            i += 2
        else:
            takes_value = word in _INTERPRETER_VALUES or (letter in ("W", "X") and not attached)
            i += 2 if takes_value else 1
            continue
        ran_code = True
        if found := code_reason(name, code.text, code.dynamic):
            return found
        if fam == "python":
            break  # what follows -c is the code's argv
    if ran_code:
        return _in_place(screen, args[i:]) if inplace else None
    if i < len(args) and args[i].text != "-":
        return None  # a script file, as with `python3 script.py`
    if feed.kind == "pipe":
        return f"pipes code into an interpreter ({name})"
    if feed.kind == "here":
        return f"feeds a here-document to an interpreter ({name})"
    return None


def _python_cluster(word: str) -> tuple[str, str]:
    """For ``-Ic CODE``, ``-cCODE``, ``-Bm mod``, ``-Wignore``: the letter that takes a value
    (c, m, W or X) and the value attached to it, if any."""
    if word.startswith("--"):
        return "", ""
    for j, letter in enumerate(word[1:], start=2):
        if letter in "cmWX":
            return letter, word[j:]
    return "", ""


def _awk(screen: Screen, name: str, args: list[Arg]) -> str | None:
    inplace, i = False, 0
    while i < len(args) and args[i].text.startswith("-") and args[i].text != "-":
        word = args[i].text
        if word == "--":
            i += 1
            break
        if word in ("-f", "--file"):
            return None  # the program is a file, as with a script
        if word in ("-i", "--include") and i + 1 < len(args):
            inplace = inplace or args[i + 1].text == "inplace"
        i += 2 if word in ("-F", "-v", "--assign", "--field-separator", "-i", "--include") else 1
    if i >= len(args):
        return None
    if found := code_reason(name, args[i].text, args[i].dynamic):
        return found
    return _in_place(screen, args[i + 1 :]) if inplace else None


def _in_place(screen: Screen, files: list[Arg]) -> str | None:
    for arg in split(files)[1]:
        if found := screen.writes(arg):
            return found
    return None
