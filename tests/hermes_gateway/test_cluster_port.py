"""The cluster is a port of the runner, not a graft on it: the runner inherits nothing, no
module sets its attributes from outside, and `hermes_gateway/core/` imports nothing of
`hermes_gateway/cluster/` (the dependency points from the cluster to the core, whose
`SessionLeases` the cluster's `Keeping` implements)."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

import pytest

from hermes_gateway.core.runner import GatewayRunner
from tests.source_tree import parse, parse_text

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "hermes_gateway"
RUNNER = PACKAGE / "core" / "runner.py"


def _imports(path: Path) -> set[str]:
    """Every module ``path`` imports, annotations-only imports included."""
    found: set[str] = set()
    for node in ast.walk(parse(path)):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
    return found


def _runner_attribute_writes(source: str, where: str) -> list[str]:
    """The assignments in ``source`` to an attribute of something called ``runner``
    (``runner.x = ...``, ``self.runner.x = ...``, augmented or annotated alike)."""
    found: list[str] = []
    for node in ast.walk(parse_text(source)):
        targets: list[ast.expr] = []
        if isinstance(node, ast.Assign):
            targets = node.targets
        elif isinstance(node, ast.AugAssign | ast.AnnAssign):
            targets = [node.target]
        for target in targets:
            if not isinstance(target, ast.Attribute):
                continue
            owner = target.value
            if (isinstance(owner, ast.Name) and owner.id == "runner") or (
                isinstance(owner, ast.Attribute) and owner.attr == "runner"
            ):
                found.append(f"{where}:{node.lineno}: {ast.unparse(node)}")
    return found


def test_the_runner_inherits_nothing() -> None:
    assert GatewayRunner.__mro__ == (GatewayRunner, object)


def test_no_module_sets_the_runners_attributes() -> None:
    found = [
        write
        for path in sorted(PACKAGE.rglob("*.py"))
        if path != RUNNER
        for write in _runner_attribute_writes(path.read_text(), str(path.relative_to(ROOT)))
    ]
    assert found == [], "pass it to the runner's constructor instead:\n" + "\n".join(found)


def test_the_guard_sees_an_attribute_set_on_the_runner() -> None:
    graft = "runner.fence_for = f\nself.runner.lease_until: int = 1\nrunner.n += 1\nrunner = 2\n"
    assert _runner_attribute_writes(graft, "graft.py") == [
        "graft.py:1: runner.fence_for = f",
        "graft.py:2: self.runner.lease_until: int = 1",
        "graft.py:3: runner.n += 1",
    ]


def test_the_core_imports_nothing_of_the_cluster() -> None:
    found = {
        f"{path.relative_to(ROOT)} -> {name}"
        for path in sorted((PACKAGE / "core").rglob("*.py"))
        for name in _imports(path)
        if name == "hermes_gateway.cluster" or name.startswith("hermes_gateway.cluster.")
    }
    assert found == set()


def _members(port: type) -> list[str]:
    return [name for name, v in vars(port).items() if inspect.isfunction(v) and name[0] != "_"]


def _parameters(method: object) -> list[str]:
    return list(inspect.signature(method).parameters)  # type: ignore[arg-type]


def test_each_side_implements_the_port_it_is_passed_as() -> None:
    """The cluster's `Keeping` and one process's `SoleLeases` are the runner's leases; the
    runner is their `LeaseHolder`: each has every member, with the port's parameters."""
    from hermes_gateway.cluster.keeping import Keeping
    from hermes_gateway.core.session_leases import LeaseHolder, SessionLeases, SoleLeases

    assert _members(SessionLeases) == ["bind", "fence_for", "until", "lost"]
    assert _members(LeaseHolder) == ["knows", "idle", "extend", "relinquish", "forget"]
    for side, port in (
        (Keeping, SessionLeases),
        (SoleLeases, SessionLeases),
        (GatewayRunner, LeaseHolder),
    ):
        for name in _members(port):
            assert _parameters(getattr(side, name)) == _parameters(getattr(port, name)), name


async def test_the_cluster_leases_are_bound_to_one_runner_for_good() -> None:
    from hermes_gateway.cluster.keeping import Keeping
    from hermes_gateway.cluster.local import LocalCoordinator

    never = lambda key: False  # noqa: E731
    leases = Keeping(LocalCoordinator("a", 5.0), never, never, lambda dropped: None)
    with pytest.raises(RuntimeError, match="no runner"):
        leases.runner.idle("k")
    runner, other = object(), object()
    leases.bind(runner)  # type: ignore[arg-type]
    assert leases.runner is runner
    with pytest.raises(RuntimeError, match="already"):
        leases.bind(other)  # type: ignore[arg-type]
    assert leases.runner is runner
