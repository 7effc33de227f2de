"""The built-in tools by name, their settings, and `build_registry`.

Tool modules are imported only when a tool is enabled (the web tools pull in an HTML library),
and this module imports none of them, so the config can validate names cheaply.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from tools.registry import Tool, ToolRegistry

Approval = Literal["off", "dangerous", "always"]

# name -> "module:factory"; a factory takes `ToolSettings` and returns the tool
BUILTINS: dict[str, str] = {
    "terminal": "tools.terminal:make_terminal",
    "read_file": "tools.files:make_read_file",
    "write_file": "tools.files:make_write_file",
    "patch": "tools.patch:make_patch",
    "search_files": "tools.search:make_search_files",
    "web_search": "tools.web:make_web_search",
    "web_extract": "tools.web:make_web_extract",
    "vision_analyze": "tools.vision:make_vision",
    "memory": "tools.memory:make_memory",
    "session_search": "tools.recall:make_session_search",
    "hindsight_retain": "tools.hindsight:make_retain",
    "hindsight_recall": "tools.hindsight:make_recall",
    "hindsight_reflect": "tools.hindsight:make_reflect",
    "hindsight_forget": "tools.hindsight:make_forget",
    "skills_list": "tools.skills:make_skills_list",
    "skill_view": "tools.skills:make_skill_view",
    "skill_manage": "tools.skills:make_skill_manage",
    "delegate_task": "tools.delegate:make_delegate",
    "execute_code": "tools.execute_code:make_execute_code",
    "cronjob": "tools.cronjob:make_cronjob",
    "cronjob_manage": "tools.cronjob:make_cronjob_manage",  # the reference's name for it
}
# built after the others and given them: a script calls the session's own tools
_TAKES_TOOLS = frozenset({"execute_code"})
BUILTIN_NAMES: tuple[str, ...] = tuple(BUILTINS)


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
    """Everything the built-in tools are configured with (mapped from the gateway config)."""

    home: Path | None = None  # MEMORY.md and skills/ live here
    terminal: TerminalSettings = TerminalSettings()
    web: WebSettings = WebSettings()
    vision_max_bytes: int = 10 * 1024 * 1024
    memory_max_chars: int = 50_000
    memory_scope: Literal["user", "shared"] = "shared"  # MEMORY.md per user, or one for all
    search_timeout_s: float = 20.0  # wall clock of one regex search (a child process)
    max_write_bytes: int = 1024 * 1024  # content of one write_file, edit text of one patch
    code: CodeSettings = CodeSettings()


def factory(name: str) -> Callable[[ToolSettings], Tool]:
    """The factory of a built-in tool (`KeyError` for an unknown name)."""
    module, _, attr = BUILTINS[name].partition(":")
    made: Callable[[ToolSettings], Tool] = getattr(importlib.import_module(module), attr)
    return made


def build_registry(enabled: Iterable[str], settings: ToolSettings) -> ToolRegistry:
    """The registry of the named built-in tools, in the given order."""
    names = list(dict.fromkeys(enabled))
    made = {name: factory(name)(settings) for name in names if name not in _TAKES_TOOLS}
    for name in names:
        if name in _TAKES_TOOLS:
            module, _, attr = BUILTINS[name].partition(":")
            make = getattr(importlib.import_module(module), attr)
            made[name] = make(settings, ToolRegistry(made.values()))
    return ToolRegistry(made[name] for name in names)


def require_home(settings: ToolSettings, tool: str) -> Path:
    if settings.home is None:
        raise ValueError(f"{tool} needs ToolSettings.home")
    return settings.home
