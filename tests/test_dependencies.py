"""Every distribution the product imports is declared in pyproject.toml, with an upper bound,
and the installed versions are inside the declared ranges."""

from __future__ import annotations

import ast
import importlib.metadata
import re
import sys
import tomllib
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from tests.source_tree import parse

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("adapters", "hermes_gateway", "agent_core", "tools")
# the SDKs reached through a shim, and aiosqlite (the store's fast path)
SHIMMED = ("aiohttp", "python-telegram-bot", "discord.py", "slack-bolt", "slack-sdk", "aiosqlite")


def runtime_requirements() -> list[Requirement]:
    """`dependencies` and every extra but `dev`: what an installed gateway may import."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    lines = list(project["dependencies"])
    for extra, more in project.get("optional-dependencies", {}).items():
        if extra != "dev":
            lines += more
    return [Requirement(line) for line in lines]


def top_level_imports(path: Path) -> set[str]:
    """Absolute imports anywhere in the module, also the ones inside functions."""
    found: set[str] = set()
    for node in ast.walk(parse(path)):
        if isinstance(node, ast.Import):
            found.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module.split(".")[0])
    return found


def test_every_imported_distribution_is_declared() -> None:
    declared = {canonicalize_name(r.name) for r in runtime_requirements()}
    owners = importlib.metadata.packages_distributions()
    ours = set(PACKAGES)
    undeclared: dict[str, list[str]] = {}
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            for name in top_level_imports(path) - ours - set(sys.stdlib_module_names):
                dists = {canonicalize_name(d) for d in owners.get(name, [])}
                if not dists & declared:
                    key = f"{name} ({', '.join(sorted(dists)) or 'no distribution'})"
                    undeclared.setdefault(key, []).append(str(path.relative_to(ROOT)))
    assert undeclared == {}, f"imported but not declared in pyproject.toml: {undeclared}"


def test_every_runtime_dependency_has_an_upper_bound() -> None:
    open_ended = [
        str(r)
        for r in runtime_requirements()
        if not any(s.operator in ("<", "<=", "==", "~=") for s in r.specifier)
    ]
    assert open_ended == []


def test_installed_versions_are_inside_the_declared_ranges() -> None:
    outside = {}
    for r in runtime_requirements():
        if r.marker is not None and not r.marker.evaluate():
            continue
        try:
            version = importlib.metadata.version(r.name)
        except importlib.metadata.PackageNotFoundError:
            continue  # an extra not installed here
        if not r.specifier.contains(version, prereleases=True):
            outside[r.name] = f"{version} not in {r.specifier}"
    assert outside == {}


def test_shimmed_sdks_are_capped_below_their_next_minor_release() -> None:
    """A shim is verified against the minor release installed: the cap must not reach past
    the next one (for example `aiohttp<3.15` with 3.14.x installed)."""
    by_name = {canonicalize_name(r.name): r for r in runtime_requirements()}
    too_loose = {}
    for name in SHIMMED:
        major, minor = (
            int(part) for part in re.findall(r"\d+", importlib.metadata.version(name))[:2]
        )
        next_minor = f"{major}.{minor + 1}"
        if by_name[canonicalize_name(name)].specifier.contains(next_minor):
            too_loose[name] = str(by_name[canonicalize_name(name)].specifier)
    assert too_loose == {}, f"caps past the next unverified minor release: {too_loose}"
