"""docs/architecture.md names only files and code that exist, and the README links to it; every
other page under docs/ and the README name only files, code and config keys that exist.

The docs' code references are backticked: a path ending in `.py` or `.md`, or a dotted name
starting with one of the four packages (`hermes_gateway.core.runner.GatewayRunner.dispatch`).
On the other pages a dotted name may also be a config key (`tools.terminal.tmp_mb`), and a bare
file name one in the repository (`shell_code.py`).
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


# files the pages name that are the user's or an example's, not the repository's
NOT_OURS = frozenset({"MEMORY.md", "json.py"})
# entry-point groups, named like modules
GROUPS = frozenset({"hermes_gateway.platforms", "hermes_gateway.tools"})


def is_config_key(dotted: str) -> bool:
    """Whether ``dotted`` walks the config schema's fields (`tools.terminal.tmp_mb`)."""
    from hermes_gateway.config import Config

    model: Any = Config
    for part in dotted.split("."):
        fields = getattr(model, "model_fields", None)
        if fields is None or part not in fields:
            return False
        annotation = fields[part].annotation
        model = next(
            (a for a in (annotation, *getattr(annotation, "__args__", ())) if _is_model(a)),
            annotation,
        )
    return True


def _is_model(obj: Any) -> bool:
    from pydantic import BaseModel

    return inspect.isclass(obj) and issubclass(obj, BaseModel)


def _repo_names() -> set[str]:
    """The names of the project's own .py and .md files (not the virtualenv's)."""
    places = [*PACKAGES, "tests", "docs", "bench", "scripts", "deploy"]
    found = {p.name for where in places for p in (ROOT / where).rglob("*.[pm][yd]")}
    return found | {p.name for p in ROOT.glob("*.md")}


PAGES = [*sorted(p for p in (ROOT / "docs").glob("*.md") if p != DOC), ROOT / "README.md"]


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_page_names_existing_files_code_and_keys(page: Path) -> None:
    paths, names = references(page.read_text())
    known = _repo_names()
    missing_files = sorted(
        {
            p
            for p in paths
            if not (ROOT / p).is_file() and not ("/" not in p and p in known) and p not in NOT_OURS
        }
    )
    assert not missing_files, f"{page.name} names files that do not exist: {missing_files}"
    missing = sorted(
        {n for n in set(names) if n not in GROUPS and not is_config_key(n) and not resolves(n)}
    )
    assert not missing, f"{page.name} names code or config keys that do not exist: {missing}"


@pytest.mark.parametrize(
    ("dotted", "exists"),
    [("tools.terminal.tmp_mb", True), ("tools.terminal.tmp_gb", False), ("store.url", True)],
)
def test_config_keys_are_told_from_stale_ones(dotted: str, exists: bool) -> None:
    assert is_config_key(dotted) is exists


def test_the_checker_finds_references() -> None:
    text = "see `hermes_gateway/core/bus.py`, `tools.sandbox.spawn` and `runner.busy_policy`"
    assert references(text) == (["hermes_gateway/core/bus.py"], ["tools.sandbox.spawn"])


def test_the_readme_links_the_doc() -> None:
    readme = (ROOT / "README.md").read_text()
    assert "(docs/architecture.md)" in readme
