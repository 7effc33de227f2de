"""Dependencies point one way: adapters -> hermes_gateway -> agent_core -> tools."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
LAYERS = ["adapters", "hermes_gateway", "agent_core", "tools"]


def imports_of(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
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
    assert readers == ["hermes_gateway/config.py"]


def test_disabled_platform_sdks_are_not_imported() -> None:
    import subprocess
    import sys

    code = (
        "import sys; from hermes_gateway.server import Gateway; "
        "print(sorted(m for m in ('telegram', 'discord', 'slack_bolt') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
