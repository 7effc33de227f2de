"""Dependencies point one way: adapters -> hermes_gateway -> agent_core -> tools, and inside
`hermes_gateway` from the operator's CLI down to the shared base modules."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tests.source_tree import parse

ROOT = Path(__file__).resolve().parent.parent
LAYERS = ["adapters", "hermes_gateway", "agent_core", "tools"]


def imports_of(path: Path) -> set[str]:
    tree = parse(path)
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module.split(".")[0])
    return found


@pytest.mark.parametrize("layer", LAYERS)
def test_no_upward_imports(layer: str) -> None:
    forbidden = set(LAYERS[: LAYERS.index(layer)])
    offenders = {
        str(path.relative_to(ROOT)): sorted(imports_of(path) & forbidden)
        for path in (ROOT / layer).rglob("*.py")
        if imports_of(path) & forbidden
    }
    assert offenders == {}


# Inside hermes_gateway, by rank: a module may import its own part, any lower rank, and the
# base (the top-level modules every part shares: errors, config, events, metrics, logs, ...).
# Imports under `if TYPE_CHECKING:` are annotations only and may point anywhere.
RANKS = [
    ["__main__"],
    ["cli"],
    ["server"],
    ["lifecycle"],
    ["dashboard"],
    ["control"],
    ["scheduler"],
    ["cluster"],
    ["core"],
    ["agents", "platforms"],
    ["memory", "mcp", "media_in"],
    ["store", "text", "liveness", "browser"],
]
BASE = {
    "__init__",
    "errors",
    "config",
    "platform_spec",
    "events",
    "metrics",
    "logs",
    "thread_hop",
    "traces",
}


def part_of(dotted: str) -> str | None:
    parts = dotted.split(".")
    if parts[0] != "hermes_gateway" or len(parts) < 2:
        return None
    return parts[1]


def runtime_imports(path: Path) -> set[str]:
    tree = parse(path)
    typing_only: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            typing_only.update(id(n) for stmt in node.body for n in ast.walk(stmt))
    found: set[str] = set()
    for node in ast.walk(tree):
        if id(node) in typing_only:
            continue
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
    return found


def test_gateway_parts_import_only_downward() -> None:
    rank = {part: i for i, row in enumerate(RANKS) for part in row}
    package = ROOT / "hermes_gateway"
    assert {p.name for p in package.iterdir() if (p / "__init__.py").exists()} == (
        set(rank) - {"__main__", "server", "lifecycle"}
    ) | {"config", "logs", "traces"}, "a new part of hermes_gateway needs a rank here"
    offenders = []
    for path in package.rglob("*.py"):
        rel = path.relative_to(package).parts
        mine = rel[0] if len(rel) > 1 else rel[0].removesuffix(".py")
        if mine in BASE:
            allowed = BASE
        else:
            allowed = {p for p, r in rank.items() if r > rank[mine] or p == mine} | BASE
        for dotted in runtime_imports(path):
            part = part_of(dotted)
            if part is not None and part != "__version__" and part not in allowed:
                offenders.append(f"{path.relative_to(ROOT)} -> {dotted}")
    assert sorted(offenders) == []


@pytest.mark.parametrize("layer", ["agent_core", "tools"])
def test_sync_layers_never_import_asyncio(layer: str) -> None:
    offenders = [
        str(p.relative_to(ROOT)) for p in (ROOT / layer).rglob("*.py") if "asyncio" in imports_of(p)
    ]
    assert offenders == []


def test_only_config_reads_the_environment() -> None:
    readers = [
        str(p.relative_to(ROOT))
        for layer in LAYERS
        for p in (ROOT / layer).rglob("*.py")
        if "os.environ" in p.read_text() or "os.getenv" in p.read_text()
    ]
    assert readers == ["hermes_gateway/config/__init__.py"]


def test_disabled_platform_sdks_are_not_imported() -> None:
    """Building the gateway (whose default config enables only the local API) imports no
    platform SDK and no platform module beyond what the specs themselves import: an added
    platform's adapter-side code waits for its platform to be enabled."""
    import subprocess
    import sys

    code = (
        "import sys; from hermes_gateway.platform_spec import platform_specs; platform_specs(); "
        "specs = {m for m in sys.modules if m.startswith('adapters.')}; "
        "from hermes_gateway.server import Gateway; "
        "sdks = ('telegram', 'discord', 'slack_bolt', 'mautrix', 'aioimaplib', 'aiosmtplib'); "
        "print(sorted(m for m in sdks if m in sys.modules)"
        " + sorted(m for m in sys.modules if m.startswith('adapters.') and m not in specs))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_adapters_use_the_gateway_through_its_public_api_only() -> None:
    """A platform package sees the gateway through `hermes_gateway.platforms` alone (its
    `__init__` lists what a platform may use), so the gateway's insides can change under
    it; every name listed there exists."""
    import hermes_gateway.platforms as api

    offenders = sorted(
        f"{path.relative_to(ROOT)} -> {node.module}"
        for where in ("adapters", "tests/toy_platform")
        for path in (ROOT / where).rglob("*.py")
        for node in ast.walk(parse(path))
        if isinstance(node, ast.ImportFrom)
        and (node.module or "").startswith("hermes_gateway")
        and node.module != "hermes_gateway.platforms"
    )
    assert offenders == []
    missing = [name for name in api.__all__ if getattr(api, name, None) is None]
    assert missing == []
