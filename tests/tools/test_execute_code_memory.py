"""`execute_code`'s memory limit holds for the script and everything it starts together: by a
cgroup per call where the machine gives one, else by the watcher; in both sandbox modes."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tools import ToolContext, memory_group, sandbox

from .code_kit import gone_from, run, tools
from .code_kit import mode as mode

# Each child stays far inside the per-process limit (RLIMIT_AS, 512 MiB); together they are
# 3.5 times the limit
_CHILDREN = """
import os, sys, time
pids = []
for _ in range({n}):
    pid = os.fork()
    if pid == 0:
        hoard = bytearray({mib} * 1024 * 1024)
        for at in range(0, len(hoard), 4096):
            hoard[at] = 1
        print("touched", flush=True)
        time.sleep({linger})
        os._exit(0)
    pids.append(pid)
for pid in pids:
    os.waitpid(pid, 0)
print(open("/proc/self/cgroup").read())
print("all done")
"""
_SIX = _CHILDREN.format(n=6, mib=300, linger=3)


@pytest.fixture(params=["cgroup", "watcher"])
def bound(request: pytest.FixtureRequest) -> Iterator[str]:
    """Both mechanisms: a cgroup where this machine lets us make one, and the watcher, forced."""
    if request.param == "cgroup" and memory_group.support().kind == "watcher":
        pytest.skip(f"no cgroup here: {memory_group.support().why}")
    memory_group.force_watcher(request.param == "watcher")
    yield request.param
    memory_group.force_watcher(False)


def _leftovers() -> list[Path]:
    base = memory_group.support().base
    return list(base.glob(f"hermes-{os.getpid()}-*")) if base else []


@pytest.mark.usefixtures("mode")
def test_children_over_the_limit_together_are_killed_as_one(ctx: ToolContext, bound: str) -> None:
    content, ok = run(ctx, _SIX, tools(memory_mb=512, timeout_s=30))
    assert not ok
    assert content.startswith(
        "Error: the script was killed for exceeding its memory limit of 512 MB "
        "(all its processes together)"
    ), content
    assert "all done" not in content
    assert gone_from(ctx.workspace)  # none of the children survives
    assert _leftovers() == []
    # the gateway is fine: the next script runs
    content, ok = run(ctx, "print('next')\n", tools(memory_mb=512))
    assert ok and content.startswith("next"), content


@pytest.mark.usefixtures("mode")
def test_a_script_within_the_limit_together_runs(ctx: ToolContext, bound: str) -> None:
    # all three hold their memory at the same time for a while
    script = _CHILDREN.format(n=3, mib=100, linger=0.5)
    content, ok = run(ctx, script, tools(memory_mb=512, timeout_s=60))
    assert ok, content
    assert content.count("touched") == 3 and "all done" in content
    if bound == "cgroup":  # in a group of its own, made for this call and removed after it
        assert f"/hermes-{os.getpid()}-" in content
        assert _leftovers() == []


def test_the_script_cannot_reach_its_group_to_raise_the_limit(ctx: ToolContext) -> None:
    if sandbox.current_mode() != "namespace":
        pytest.skip("only a namespace can hide the cgroup file systems")
    if memory_group.support().kind == "watcher":
        pytest.skip(f"no cgroup here: {memory_group.support().why}")
    sandbox.setup([])  # what the gateway hides at its start
    content, ok = run(
        ctx,
        """
        import os
        for line in open("/proc/self/cgroup").read().splitlines():
            _, controllers, path = line.split(":", 2)
            tops = ["/sys/fs/cgroup", *(f"/sys/fs/cgroup/{c}" for c in controllers.split(","))]
            for top in [*tops, "/sys/fs/cgroup/unified"]:
                for name in ["memory.limit_in_bytes", "memory.max", "cgroup.procs"]:
                    for where in [path, os.path.dirname(path)]:
                        try:
                            os.close(os.open(f"{top}{where}/{name}", os.O_WRONLY))
                            print("writable:", f"{top}{where}/{name}")
                        except OSError:
                            pass
        print("listed:", os.listdir("/sys/fs/cgroup"))
        """,
        tools(memory_mb=512),
    )
    assert ok, content
    assert "writable:" not in content
    assert "listed: []" in content


def test_a_group_is_removed_and_one_left_by_a_dead_gateway_too() -> None:
    s = memory_group.support()
    if s.base is None:
        pytest.skip(f"no cgroup here: {s.why}")
    group = memory_group.open_group(64 * 1024 * 1024)
    assert group.path is not None and group.path.is_dir()
    group.close()
    assert not group.path.exists()
    stale = s.base / "hermes-999999999-0123456789ab"  # no such pid
    stale.mkdir()
    memory_group._remove_stale(s.base)
    assert not stale.exists()
