"""The installed tools, found through their specs (`tools.spec.ToolSpec`) in the
``hermes_gateway.tools`` entry point group, the settings they are built with, and `build_registry`.

Tool modules are imported only when a tool is enabled (the web tools pull in an HTML library),
and this module imports none of them, so the config can validate names cheaply.
"""

from __future__ import annotations

import functools
import importlib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from importlib.metadata import entry_points
from pathlib import Path
from typing import Literal, TypeVar

from pydantic import BaseModel

from tools.registry import Tool, ToolRegistry
from tools.spec import ENTRY_POINT_GROUP, ToolSpec, installed_specs

Approval = Literal["off", "dangerous", "always"]
_M = TypeVar("_M", bound=BaseModel)


@dataclass(frozen=True, slots=True)
class TerminalSettings:
    timeout_s: float = 60.0  # default per command; the model may ask for up to max_timeout_s
    max_timeout_s: float = 600.0
    approval: Approval = "dangerous"
    approval_timeout_s: float = 120.0
    # what commands see of the gateway's environment: an allow-list (built by the config)
    env: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class WebSettings:
    search_url: str = ""  # a SearXNG-compatible instance; empty = web_search unavailable
    timeout_s: float = 20.0
    max_bytes: int = 2_000_000
    max_redirects: int = 5
    allow_private: bool = False  # loopback/private/link-local targets (SSRF guard)
    allowed_networks: tuple[str, ...] = ()  # CIDRs allowed even when private, e.g. 127.0.0.1/32
    user_agent: str = "HermesGateway/0.1 (+web_extract)"


@dataclass(frozen=True, slots=True)
class CodeSettings:
    """`execute_code`: the script's limits (it is confined like `terminal` besides)."""

    timeout_s: float = 300.0
    max_calls: int = 50  # tool calls per script
    max_stdout_chars: int = 50_000  # returned to the model; the rest is spilled to a file
    spill_max_bytes: int = 10 * 1024 * 1024  # past this much stdout the script is killed
    memory_mb: int = 1024  # address space
    max_processes: int = 64
    open_files: int = 256


@dataclass(frozen=True, slots=True)
class ToolSettings:
    """Everything the tools are configured with (mapped from the gateway config): the typed
    fields are the built-in tools' (some mix several keys, or the environment), `sections`
    holds every tool's own section as its spec's model validated it."""

    home: Path | None = None  # MEMORY.md and skills/ live here
    terminal: TerminalSettings = TerminalSettings()
    web: WebSettings = WebSettings()
    vision_max_bytes: int = 10 * 1024 * 1024
    memory_max_chars: int = 50_000
    memory_scope: Literal["user", "shared"] = "shared"  # MEMORY.md per user, or one for all
    search_timeout_s: float = 20.0  # wall clock of one regex search (a child process)
    max_write_bytes: int = 1024 * 1024  # content of one write_file, edit text of one patch
    code: CodeSettings = CodeSettings()
    # every installed tool's section under `tools:` (by key), as its spec's model validated it
    sections: Mapping[str, BaseModel] = field(default_factory=dict)

    def section(self, key: str, kind: type[_M]) -> _M:
        """``tools.<key>`` typed as ``kind`` (a tool reading its own settings); the model's
        defaults when the settings came from no config (a test's `ToolSettings()`)."""
        found = self.sections.get(key)
        if found is None:
            return kind()
        if not isinstance(found, kind):
            raise TypeError(f"tools.{key} is a {type(found).__name__}, not {kind.__name__}")
        return found


@functools.cache
def tool_specs() -> tuple[ToolSpec, ...]:
    """Every installed tool's spec, by name; loaded once (spec modules import no tool)."""
    points = entry_points(group=ENTRY_POINT_GROUP)
    specs = installed_specs(points, ENTRY_POINT_GROUP, ToolSpec, "tool")
    return tuple(sorted(specs, key=lambda s: s.name))


def tool_names() -> tuple[str, ...]:
    """The names `tools.enabled` may hold: every installed tool's."""
    return tuple(spec.name for spec in tool_specs())


def tool_spec(name: str) -> ToolSpec:
    """The installed tool called ``name`` (`KeyError` for an unknown name)."""
    for spec in tool_specs():
        if spec.name == name:
            return spec
    raise KeyError(name)


def tool_sections() -> dict[str, type[BaseModel]]:
    """Section key under `tools:` -> its model, from every installed tool's spec; two tools
    sharing a key must share its model."""
    sections: dict[str, type[BaseModel]] = {}
    for spec in tool_specs():
        if spec.section is None or spec.settings is None:
            continue
        if sections.setdefault(spec.section, spec.settings) is not spec.settings:
            raise RuntimeError(f"tools.{spec.section} is given two models (tool {spec.name})")
    return sections


def factory(name: str) -> Callable[..., Tool]:
    """The factory of an installed tool, imported now (`KeyError` for an unknown name)."""
    module, _, attr = tool_spec(name).factory.partition(":")
    made: Callable[..., Tool] = getattr(importlib.import_module(module), attr)
    return made


def build_registry(enabled: Iterable[str], settings: ToolSettings) -> ToolRegistry:
    """The registry of the named tools, in the given order. A tool that needs "tools" is built
    after the others and given them (a script of `execute_code` calls the session's tools)."""
    specs = {name: tool_spec(name) for name in dict.fromkeys(enabled)}
    needs = {name: spec.needs for name, spec in specs.items()}
    later = {name for name, spec in specs.items() if "tools" in spec.needs}
    made: dict[str, Tool] = {name: factory(name)(settings) for name in specs if name not in later}
    for name in specs:
        if name in later:
            made[name] = factory(name)(settings, ToolRegistry(made.values(), needs))
    return ToolRegistry((made[name] for name in specs), needs)


def require_home(settings: ToolSettings, tool: str) -> Path:
    if settings.home is None:
        raise ValueError(f"{tool} needs ToolSettings.home")
    return settings.home
