"""The approval screen's commands that change what it knows rather than act: ``cd`` (where
relative paths land), assignments (``export``, ``declare``, ``read``, loop variables) and tests
(``[[``, ``[``, ``test``)."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from tools.shell_commands import DYN, NAME, Arg, Input, handles, split

if TYPE_CHECKING:
    from tools.shell_screen import Screen


@handles("[[", "[", "test", "true", "false", ":")
def _test(screen: Screen, name: str, args: list[Arg], feed: Input) -> str | None:
    return None  # only compares; its $(...) were screened on their own


@handles("cd", "pushd", "popd")
def _cd(screen: Screen, name: str, args: list[Arg], feed: Input) -> str | None:
    paths = split(args)[1]
    if name == "popd" or (paths and (paths[0].dynamic or paths[0].glob)):
        screen.cwd = None
    elif not paths or paths[0].text.startswith("~"):
        screen.cwd = "~"
    elif paths[0].text == "-":
        screen.cwd = None
    elif screen.cwd is not None:
        screen.cwd = os.path.normpath(os.path.join(screen.cwd, paths[0].text))
    return None


@handles("export", "declare", "typeset", "local", "readonly")
def _declare(screen: Screen, name: str, args: list[Arg], feed: Input) -> str | None:
    for arg in split(args)[1]:
        key, eq, value = arg.text.partition("=")
        if eq and NAME.fullmatch(key) and (found := screen.assign(key, value)):
            return found
    return None


@handles("read", "mapfile", "readarray", "getopts", "for", "select", "unset")
def _unknown_values(screen: Screen, name: str, args: list[Arg], feed: Input) -> str | None:
    names = split(args)[1][:1] if name in ("for", "select") else split(args)[1]
    for arg in names:
        if NAME.fullmatch(arg.text):
            screen.env[arg.text] = DYN
    return None
