"""A pattern that is costly to compile (thousands of Unicode classes, case-insensitive) costs
the gateway no CPU: `search_files` compiles the model's pattern, and its glob, only in the
child, which a stop kills mid-compile. Measured as the CPU time of this process, the one that
runs the tool, while the child burns; on both engines (ripgrep refuses a look-ahead, and the
Python child takes over) and for a glob listing."""

from __future__ import annotations

import shutil
import threading
import time
from pathlib import Path
from typing import Any

import psutil
import pytest

from tools.errors import ToolError
from tools.registry import ToolContext
from tools.search_files import SearchFilesTool

# 10,000 characters; Python's re.compile takes ~5 s of CPU over it, ~17 s case-insensitive
CLASSES = "[\u0100-\uffff]" * 2000
CASES = {
    "python grep": (False, {"pattern": CLASSES, "case_sensitive": False}),
    "ripgrep, then python": (True, {"pattern": CLASSES[:-10] + "(?=x)", "case_sensitive": False}),
    "glob listing": (False, {"glob": CLASSES}),
}
BURNED_S = 1.0  # the child's CPU before the stop: it is compiling by then


def compiling_child() -> psutil.Process | None:
    """The search child (a Python running `search_walk.py`) once it has burned `BURNED_S`."""
    for proc in psutil.Process().children(recursive=True):
        try:
            if not proc.name().startswith("python"):
                continue
            ours = any(arg.endswith("search_walk.py") for arg in proc.cmdline())
            if ours and sum(proc.cpu_times()[:2]) >= BURNED_S:
                return proc
        except psutil.Error:
            continue
    return None


@pytest.mark.parametrize("case", list(CASES))
def test_a_costly_pattern_compiles_in_the_child_and_a_stop_ends_it(
    tmp_path: Path, case: str
) -> None:
    with_rg, args = CASES[case]
    rg = shutil.which("rg") if with_rg else None
    if with_rg and rg is None:
        pytest.skip("ripgrep is not installed")
    (tmp_path / "notes.txt").write_text("hello\n")
    stop = threading.Event()
    tool = SearchFilesTool(rg, timeout_s=120)
    ctx = ToolContext(workspace=tmp_path, should_stop=stop.is_set)
    outcome: dict[str, Any] = {}

    def search() -> None:
        try:
            outcome["text"] = tool.call(tool.Args.model_validate(args), ctx)
        except ToolError as exc:
            outcome["error"] = str(exc)

    used = time.process_time()  # every thread of this process; the children are not in it
    caller = threading.Thread(target=search)
    caller.start()
    child = None
    deadline = time.monotonic() + 60
    while child is None and caller.is_alive() and time.monotonic() < deadline:
        time.sleep(0.1)
        child = compiling_child()
    stop.set()
    caller.join(30)
    used = time.process_time() - used
    assert child is not None, outcome  # the pattern was being compiled in a child
    assert not caller.is_alive() and outcome == {"error": "the search was stopped"}
    assert used < BURNED_S / 2, f"the gateway's side used {used:.2f} s of CPU"
    # a namespace's processes die a moment after its first process is killed
    _, alive = psutil.wait_procs([child], timeout=10)
    assert alive == []  # the compile was ended, not left to burn


def test_a_bad_pattern_is_still_named_to_the_model(tmp_path: Path) -> None:
    """The child compiles it and says what is wrong, on both engines."""
    for rg in {None, shutil.which("rg")}:
        tool = SearchFilesTool(rg)
        ctx = ToolContext(workspace=tmp_path)
        with pytest.raises(ToolError) as refused:
            tool.call(tool.Args.model_validate({"pattern": "(unclosed"}), ctx)
        assert str(refused.value) == (
            "pattern is not a valid regular expression: missing ), unterminated subpattern at "
            "position 0"
        )
        with pytest.raises(ToolError, match="too large or too deeply nested"):
            tool.call(tool.Args.model_validate({"pattern": "(" * 4000 + ")" * 4000}), ctx)
