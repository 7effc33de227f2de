"""Tool confinement: whatever path the model asks for (traversal, absolute, home, symlinks out,
NUL bytes, encodings), a tool never reads outside the workspace, and what it returns to the
model is an error observation, not the file.

Only `read_file` is covered here. The other tools (terminal, web, write...) are the tools
issue's, landing as this is written: SSRF to private ranges, the terminal's scrubbed
environment and command approval are theirs to test; the last test names each such tool
that can be built and is not covered here (a skip, listed by ``-ra``)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.fakes.openai import FakeOpenAI, text, tool_calls
from tests.fuzz.strategies import examples
from tests.harness import make_config, running_gateway
from tests.security import keys
from tools.errors import ToolError
from tools.paths import resolve_in_workspace

SECRET_FILE_TEXT = "SECRET-file-contents-outside-the-workspace"


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    """``<tmp>/home/workspace`` with a file inside, links pointing out, a secret outside."""
    ws = tmp_path / "home" / "workspace"
    (ws / "sub").mkdir(parents=True)
    (ws / "notes.txt").write_text("inside\n")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text(SECRET_FILE_TEXT)
    (ws / "link_out").symlink_to(outside / "secret.txt")
    (ws / "dir_out").symlink_to(outside)
    (ws / "sub" / "chain").symlink_to(ws / "dir_out")
    (ws / "loop").symlink_to(ws / "loop")
    (ws / "dangling_out").symlink_to(outside / "not-there-yet.txt")
    return ws


EVIL = [
    "../outside/secret.txt",
    "../../outside/secret.txt",
    "sub/../../outside/secret.txt",
    "{outside}/secret.txt",
    "  '{outside}/secret.txt'  ",
    "~/../outside/secret.txt",
    "link_out",
    "dir_out/secret.txt",
    "sub/chain/secret.txt",
    "notes.txt\x00../../outside/secret.txt",
    "%2e%2e/outside/secret.txt",
    "..\\outside\\secret.txt",
    "loop",
    "loop/../link_out",  # found by the property below: a loop stopped resolution early
    "loop/../loop/../dir_out/secret.txt",
    "dangling_out",
    "/etc/passwd",
    "/proc/self/environ",
]


async def test_the_model_cannot_read_outside_the_workspace(
    tmp_path: Path, llm: FakeOpenAI, workspace: Path
) -> None:
    outside = str(tmp_path / "outside")
    paths = [p.format(outside=outside) for p in EVIL]
    calls = [("read_file", {"path": p}, f"call_{i}") for i, p in enumerate(paths)]
    llm.push(tool_calls(*calls, ("read_file", {"path": "notes.txt"}, "call_ok")), text("done"))
    config = make_config(tmp_path, llm.base_url, model={"api_key": keys.MODEL_KEY})
    async with running_gateway(config) as (_, client):
        reply = await client.chat("read those files", user="s")
    results = {
        m["tool_call_id"]: m["content"] for m in llm.requests[1]["messages"] if m["role"] == "tool"
    }
    assert reply["text"] == "done"
    for i, path in enumerate(paths):
        result = results[f"call_{i}"]
        assert result.startswith("Error:"), (path, result)
        assert SECRET_FILE_TEXT not in result and "root:" not in result, (path, result)
    assert results["call_ok"] == "1| inside"


WORDS = st.sampled_from(
    [
        "..",
        ".",
        "sub",
        "notes.txt",
        "link_out",
        "dir_out",
        "chain",
        "loop",
        "dangling_out",
        "~",
        "",
        "x",
    ]
)
PATHS = st.one_of(
    st.lists(WORDS, max_size=8).map("/".join),
    st.lists(WORDS, max_size=8).map(lambda p: "/" + "/".join(p)),
    st.text(max_size=30),
)


@settings(
    max_examples=examples(200),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(raw=PATHS)
def test_any_path_resolves_inside_the_workspace_or_is_refused(workspace: Path, raw: str) -> None:
    try:
        resolved = resolve_in_workspace(workspace, raw)
    except ToolError:
        return
    root = workspace.resolve()
    assert resolved == root or root in resolved.parents
    assert os.path.realpath(resolved) == str(resolved)  # no symlink left to follow out


# The other tools' security properties (SSRF to private ranges and through redirects, the
# terminal's scrubbed environment, approvals no tool output can grant, write confinement)
# are tested with the tools: tests/tools/test_web.py, tests/tools/test_terminal.py,
# tests/tools/test_files.py and tests/integration/test_approval_telegram.py.
