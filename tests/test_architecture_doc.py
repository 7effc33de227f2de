"""docs/architecture.md names only files and code that exist, and the README links to it.

The doc's code references are backticked: a path ending in `.py` or `.md`, or a dotted name
starting with one of the four packages (`hermes_gateway.core.runner.GatewayRunner.dispatch`).
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import re
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "architecture.md"
PACKAGES = ("hermes_gateway", "adapters", "agent_core", "tools")
_TICKED = re.compile(r"`([^`\n]+)`")
_PATH = re.compile(r"^[\w./-]+\.(?:py|md)$")
_DOTTED = re.compile(r"^(?:" + "|".join(PACKAGES) + r")(?:\.\w+)+$")


def references(text: str) -> tuple[list[str], list[str]]:
    """The backticked file paths and dotted code names in ``text``."""
    paths: list[str] = []
    names: list[str] = []
    for token in _TICKED.findall(text):
        token = token.split("(", 1)[0]  # `Gateway.submit(event, durable=True)`
        if _PATH.match(token):
            paths.append(token)
        elif _DOTTED.match(token):
            names.append(token)
    return paths, names


def _has_member(owner: Any, attr: str) -> bool:
    if hasattr(owner, attr):
        return True
    if not inspect.isclass(owner):
        return False
    if dataclasses.is_dataclass(owner) and attr in {f.name for f in dataclasses.fields(owner)}:
        return True
    # an attribute set in __init__ exists only on instances
    return re.search(rf"\bself\.{attr}\s*(?::[^=\n]+)?=", inspect.getsource(owner)) is not None


def resolves(dotted: str) -> bool:
    """Import the longest module prefix of ``dotted``, then walk the rest as attributes."""
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj: Any = importlib.import_module(".".join(parts[:cut]))
        except ModuleNotFoundError:
            continue
        for attr in parts[cut:]:
            if not _has_member(obj, attr):
                return False
            obj = getattr(obj, attr, None)
        return True
    return False


def test_the_doc_names_existing_files_and_code() -> None:
    paths, names = references(DOC.read_text())
    # a scan that finds little means the patterns no longer match how the doc is written
    assert len(set(paths)) >= 20 and len(set(names)) >= 60, (len(paths), len(names))
    missing_files = sorted({p for p in paths if not (ROOT / p).is_file()})
    assert not missing_files, f"docs/architecture.md names files that do not exist: {missing_files}"
    missing_names = sorted({n for n in set(names) if not resolves(n)})
    assert not missing_names, (
        f"docs/architecture.md names code that does not exist: {missing_names}"
    )


@pytest.mark.parametrize(
    ("dotted", "exists"),
    [
        ("hermes_gateway.core.reception.Reception.submit", True),
        ("hermes_gateway.core.run.Run.steered", True),  # a dataclass field (default_factory)
        ("hermes_gateway.server.Gateway.intake_closed", True),  # set in __init__
        ("hermes_gateway.core.reception.Reception.sumbit", False),
        ("hermes_gateway.no_such_module.thing", False),
        ("tools.registry.Tool.nope", False),
    ],
)
def test_the_checker_tells_real_names_from_stale_ones(dotted: str, exists: bool) -> None:
    assert resolves(dotted) is exists


def test_the_checker_finds_references() -> None:
    text = "see `hermes_gateway/core/bus.py`, `tools.sandbox.spawn` and `runner.busy_policy`"
    assert references(text) == (["hermes_gateway/core/bus.py"], ["tools.sandbox.spawn"])


def test_the_readme_links_the_doc() -> None:
    readme = (ROOT / "README.md").read_text()
    assert "(docs/architecture.md)" in readme
