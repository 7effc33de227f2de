"""Shared fixtures for the tool tests: a workspace, a context and a recording host."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tools import ToolContext, ToolRegistry
from tools.host import ApprovalRequest, ToolHost


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    ws = tmp_path / "ws"
    ws.mkdir()
    return ws


@pytest.fixture
def ctx(workspace: Path) -> ToolContext:
    return ToolContext(workspace=workspace, session_key="test:dm:1", max_output_chars=5000)


class Approver:
    """A `ToolHost.ask_approval` that records requests and answers as told."""

    def __init__(self, answer: bool = True) -> None:
        self.answer = answer
        self.requests: list[ApprovalRequest] = []

    def __call__(self, request: ApprovalRequest, should_stop: Callable[[], bool]) -> bool:
        self.requests.append(request)
        return self.answer


def call(registry: ToolRegistry, ctx: ToolContext, name: str, /, **args: Any) -> tuple[str, bool]:
    outcome = registry.dispatch(name, json.dumps(args), ctx)
    return outcome.content, outcome.ok


def with_host(ctx: ToolContext, host: ToolHost) -> ToolContext:
    return ToolContext(
        workspace=ctx.workspace,
        session_key=ctx.session_key,
        max_output_chars=ctx.max_output_chars,
        should_stop=ctx.should_stop,
        host=host,
    )
