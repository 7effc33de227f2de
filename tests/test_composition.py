"""The gateway is composed, not wired by mutation: only the composition root (and the command
that starts it) knows `Gateway`, and no part sets attributes on another after construction."""

from __future__ import annotations

import ast
from pathlib import Path

from tests.source_tree import parse, parse_text

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "hermes_gateway"
# the root itself, and the command that builds and runs it
KNOWS_THE_GATEWAY = {"hermes_gateway/server.py", "hermes_gateway/cli/main.py"}
# Records, not parts: state a part keeps and changes as its own work goes (a run, a session's
# context, a slot of the session table, an approval ticket, a pairing row, a log record, a
# parse token), named by the variable that holds it in that module.
RECORDS = {
    "hermes_gateway/agents/cache.py": {"ctx"},
    "hermes_gateway/agents/tool_host.py": {"ticket"},
    "hermes_gateway/cli/doctor.py": {"check"},  # a local function's name, for its report
    "hermes_gateway/cluster/local.py": {"self.hub"},  # the in-process cluster's shared state
    "hermes_gateway/control/aiohttp_shim.py": {"request"},  # aiohttp's own request, patched
    "hermes_gateway/core/commands.py": {"ctx"},
    "hermes_gateway/core/job_settle.py": {"ctx"},
    "hermes_gateway/core/runner.py": {"run"},
    "hermes_gateway/core/sessions.py": {"slot"},
    "hermes_gateway/core/settle.py": {"ctx", "run"},
    "hermes_gateway/logs/bounds.py": {"record", "bucket", "self._keys[key]"},
    "hermes_gateway/logs/__init__.py": {"record"},
    "hermes_gateway/platforms/pairing.py": {"row"},
    "hermes_gateway/store/engine.py": {"engine"},  # the engine's own write gate (same module)
    "hermes_gateway/store/migrate.py": {"dbapi_conn"},  # the driver's connection, as opened
    "hermes_gateway/text/markup.py": {"opener", "item"},
}
# Parts still finished from outside, to be passed by constructor instead.
PENDING: dict[str, set[str]] = {}  # parts still wired by an attribute set: none now


def _files() -> list[tuple[str, ast.Module]]:
    return [(str(path.relative_to(ROOT)), parse(path)) for path in sorted(PACKAGE.rglob("*.py"))]


def gateway_imports(tree: ast.Module) -> bool:
    """``tree`` imports `Gateway` (or the root module whole), annotations included."""
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            whole = node.module == "hermes_gateway" and any(a.name == "server" for a in node.names)
            if node.module == "hermes_gateway.server" or whole:
                return True
        elif isinstance(node, ast.Import) and any(
            alias.name == "hermes_gateway.server" for alias in node.names
        ):
            return True
    return False


def foreign_sets(tree: ast.Module) -> list[tuple[int, str]]:
    """Each assignment to an attribute of anything but ``self``/``cls`` itself: (line, the
    object whose attribute is set, as written)."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign):
            targets = list(node.targets)
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
            targets = [node.target]
        else:
            continue
        for target in targets:
            for one in target.elts if isinstance(target, ast.Tuple) else [target]:
                if not isinstance(one, ast.Attribute):
                    continue
                owner = one.value
                if isinstance(owner, ast.Name) and owner.id in ("self", "cls"):
                    continue
                found.append((node.lineno, ast.unparse(owner)))
    return found


def test_only_the_root_and_its_command_know_the_gateway() -> None:
    knowing = {name for name, tree in _files() if gateway_imports(tree)}
    assert knowing <= KNOWS_THE_GATEWAY, sorted(knowing - KNOWS_THE_GATEWAY)


def test_no_part_sets_another_parts_attributes() -> None:
    offenders = [
        f"{name}:{line}: {owner}.<attr> = ..."
        for name, tree in _files()
        for line, owner in foreign_sets(tree)
        if owner not in RECORDS.get(name, set()) | PENDING.get(name, set())
    ]
    assert not offenders, "pass it by constructor instead:\n" + "\n".join(offenders)


def test_the_checks_see_what_they_look_for() -> None:
    wired = parse_text(
        "def f(self, gw):\n    gw.runner.on_turn = cb\n    self.x.y = 1\n    self.z = 2"
    )
    assert foreign_sets(wired) == [(2, "gw.runner"), (3, "self.x")]
    for source in (
        "from hermes_gateway.server import Gateway",
        "from hermes_gateway import server",
        "import hermes_gateway.server",
        "if TYPE_CHECKING:\n    from hermes_gateway.server import Gateway",
    ):
        assert gateway_imports(parse_text(source)), source
    assert not gateway_imports(parse_text("from hermes_gateway.core import reception"))


def declared_for_the_checker(cls: ast.ClassDef) -> list[str]:
    """Attributes ``cls`` declares under `if TYPE_CHECKING:` in its body with no value: ones it
    expects to find set by someone else (a subclass, a caller)."""
    return [
        ast.unparse(stmt.target)
        for node in cls.body
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)
        for stmt in node.body
        if isinstance(stmt, ast.AnnAssign) and stmt.value is None
    ]


def test_no_class_declares_attributes_for_the_type_checker_alone() -> None:
    """A base class that declares its subclass's parts for the type checker (as `Lifecycle`
    did with `Gateway`'s) is finished from outside: it takes them by its constructor instead."""
    offenders = [
        f"{name}: class {node.name}: {', '.join(declared)}"
        for name, tree in _files()
        for node in ast.walk(tree)
        if isinstance(node, ast.ClassDef) and (declared := declared_for_the_checker(node))
    ]
    assert not offenders, offenders
    base = parse_text("class B:\n    if TYPE_CHECKING:\n        store: Store\n        n: int = 1")
    assert declared_for_the_checker(next(n for n in base.body if isinstance(n, ast.ClassDef))) == [
        "store"
    ]
