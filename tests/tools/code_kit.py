"""Helpers for the `execute_code` tests: a registry with the script tools, running a script,
both sandbox modes, and waiting for processes to go."""

from __future__ import annotations

import os
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tools import ToolContext, ToolRegistry, sandbox
from tools.catalog import CodeSettings, TerminalSettings, ToolSettings, WebSettings, build_registry

from .conftest import call
from .test_terminal import _running

FILES = ["read_file", "write_file", "search_files", "patch"]


@pytest.fixture(params=["namespace", "fallback"])
def mode(request: pytest.FixtureRequest) -> Iterator[str]:
    """Both sandbox modes: a user namespace where the machine allows it, else the fallback."""
    if request.param == "namespace" and sandbox.current_mode() != "namespace":
        pytest.skip("user namespaces are not available here")
    sandbox.force_mode(request.param)
    yield request.param
    sandbox.force_mode(None)


def tools(
    names: list[str] | None = None, approval: str = "off", web: str = "", **code: Any
) -> ToolRegistry:
    settings = ToolSettings(
        terminal=TerminalSettings(approval=approval, env={"PATH": os.defpath}),  # type: ignore[arg-type]
        web=WebSettings(search_url=web),
        code=CodeSettings(**code),
    )
    return build_registry([*(FILES if names is None else names), "execute_code"], settings)


def run(ctx: ToolContext, script: str, registry: ToolRegistry | None = None) -> tuple[str, bool]:
    return call(registry or tools(), ctx, "execute_code", code=textwrap.dedent(script))


def gone_from(workspace: Path, timeout: float = 5) -> bool:
    """No live process works in `workspace` (a script's children do; the scripts of tests
    running beside this one, in other workspaces, do not count)."""
    deadline = time.monotonic() + timeout
    while True:
        inside = []
        for pid in filter(str.isdigit, os.listdir("/proc")):
            try:
                if os.readlink(f"/proc/{pid}/cwd") == str(workspace.resolve()):
                    inside.append(pid)
            except OSError:
                pass
        if not inside or time.monotonic() > deadline:
            return not inside
        time.sleep(0.02)


def wait_gone(marker: str, timeout: float = 5) -> bool:
    deadline = time.monotonic() + timeout
    while _running(marker) and time.monotonic() < deadline:
        time.sleep(0.02)
    return _running(marker) == []
