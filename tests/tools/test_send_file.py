"""`send_file`'s confinement: a file of the workspace is handed to the gateway; a path out of the
workspace, a symlink pointing out and a FIFO are refused before the gateway hears of them."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.tools.conftest import call, with_host
from tools import ToolContext, ToolRegistry
from tools.host import ToolHost
from tools.send_file import SendFileTool


class Recorder:
    """The gateway's `send_file` service: records what it was handed."""

    def __init__(self) -> None:
        self.files: list[tuple[str, Path, str]] = []

    def __call__(self, session_key: str, path: Path, caption: str) -> str:
        self.files.append((session_key, path, caption))
        return f"{path.name} queued"


@pytest.fixture
def sent() -> Recorder:
    return Recorder()


@pytest.fixture
def tool_ctx(ctx: ToolContext, sent: Recorder) -> ToolContext:
    return with_host(ctx, ToolHost(send_file=sent))


def registry() -> ToolRegistry:
    return ToolRegistry([SendFileTool()], {"send_file": frozenset({"send_files"})})


def test_a_workspace_file_is_handed_over_resolved_with_its_caption(
    tool_ctx: ToolContext, workspace: Path, sent: Recorder
) -> None:
    (workspace / "out").mkdir()
    (workspace / "out" / "r.csv").write_text("a,b\n")
    content, ok = call(registry(), tool_ctx, "send_file", path=" out/r.csv ", caption=" data ")
    assert ok, content
    assert content == "r.csv queued"
    assert sent.files == [("test:dm:1", (workspace / "out" / "r.csv").resolve(), "data")]


@pytest.mark.parametrize("path", ["../secret.txt", "/etc/hostname", "out/../../secret.txt"])
def test_a_path_outside_the_workspace_is_refused(
    tool_ctx: ToolContext, workspace: Path, sent: Recorder, path: str
) -> None:
    (workspace.parent / "secret.txt").write_text("no")
    content, ok = call(registry(), tool_ctx, "send_file", path=path)
    assert not ok and "outside the workspace" in content
    assert sent.files == []


def test_a_symlink_out_of_the_workspace_is_refused(
    tool_ctx: ToolContext, workspace: Path, sent: Recorder
) -> None:
    (workspace.parent / "secret.txt").write_text("no")
    (workspace / "link.txt").symlink_to(workspace.parent / "secret.txt")
    content, ok = call(registry(), tool_ctx, "send_file", path="link.txt")
    assert not ok and "outside the workspace" in content
    assert sent.files == []


def test_a_fifo_is_refused_without_blocking(
    tool_ctx: ToolContext, workspace: Path, sent: Recorder
) -> None:
    os.mkfifo(workspace / "pipe")
    content, ok = call(registry(), tool_ctx, "send_file", path="pipe")
    assert not ok and "FIFO" in content
    assert sent.files == []


def test_a_directory_or_a_missing_file_is_refused(
    tool_ctx: ToolContext, workspace: Path, sent: Recorder
) -> None:
    (workspace / "d").mkdir()
    for path, why in (("d", "directory"), ("nope.csv", "does not exist")):
        content, ok = call(registry(), tool_ctx, "send_file", path=path)
        assert not ok and why in content
    assert sent.files == []


def test_without_the_gateway_service_it_says_files_cannot_be_sent(
    ctx: ToolContext, workspace: Path
) -> None:
    (workspace / "r.csv").write_text("x")
    content, ok = call(registry(), ctx, "send_file", path="r.csv")
    assert not ok and "cannot be sent" in content
