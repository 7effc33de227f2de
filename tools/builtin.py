"""The built-in tools' specs and the models of their config sections (``tools.terminal``,
``tools.web``, ...). Each spec is registered in the ``hermes_gateway.tools`` entry point group
(pyproject.toml); this module imports no tool module, so validating the config stays cheap."""

from __future__ import annotations

import ipaddress
import re
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from tools.spec import ToolSpec

_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


class _ToolSection(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class TerminalToolConfig(_ToolSection):
    timeout_s: float = Field(60, gt=0)
    max_timeout_s: float = Field(600, gt=0)
    approval: Literal["off", "dangerous", "always"] = "dangerous"
    approval_timeout_s: float = Field(120, gt=0)
    # gateway environment variables handed to tool processes besides the built-in allow-list
    env_passthrough: tuple[str, ...] = ()
    # absolute paths hidden from tool processes besides the home, config file and database
    hide_paths: tuple[str, ...] = ()
    # absolute paths tool processes may write besides their workspace and private /tmp
    writable_paths: tuple[str, ...] = ()
    # none: a network namespace of their own (no way to the gateway's ports or any local
    # service); host: the gateway's network, for tools that must download (opt-in)
    network: Literal["none", "host"] = "none"
    tmp_mb: int = Field(1024, ge=16)  # the size of each tool call's private /tmp

    @field_validator("hide_paths", "writable_paths")
    @classmethod
    def _absolute(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        bad = [path for path in value if not path.startswith(("/", "~"))]
        if bad:
            raise ValueError(f"not absolute paths: {', '.join(map(repr, bad))}")
        return value

    @field_validator("env_passthrough")
    @classmethod
    def _env_names(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        bad = [name for name in value if not _ENV_NAME.fullmatch(name)]
        if bad:
            raise ValueError(f"not environment variable names: {', '.join(map(repr, bad))}")
        return value


class WebToolConfig(_ToolSection):
    search_url: str = ""  # SearXNG-compatible; empty = web_search unavailable
    timeout_s: float = Field(20, gt=0)
    max_bytes: int = Field(2_000_000, ge=1024)
    max_redirects: int = Field(5, ge=0, le=20)
    allow_private: bool = False
    allowed_networks: tuple[str, ...] = ()

    @field_validator("search_url")
    @classmethod
    def _http_url(cls, value: str) -> str:
        if value and not re.match(r"^https?://[^/\s]+", value):
            raise ValueError(f"{value!r} is not an http(s) URL")
        return value

    @field_validator("allowed_networks")
    @classmethod
    def _networks(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        return _ip_networks(value)


def _ip_networks(value: tuple[str, ...]) -> tuple[str, ...]:
    for item in value:
        try:
            ipaddress.ip_network(item, strict=False)
        except ValueError:
            raise ValueError(f"{item!r} is not an IP address or CIDR network") from None
    return value


class BrowserToolConfig(_ToolSection):
    """`tools.browser`, shared by every `browser_*` tool (docs/browser.md)."""

    executable: str = "/usr/bin/chromium"  # the system's Chromium; nothing is downloaded
    timeout_s: float = Field(30, gt=0)  # one call (the browser's start is bounded apart)
    max_sessions: int = Field(4, ge=1, le=64)  # contexts open at once; the oldest closes
    session_idle_s: float = Field(600, gt=0)  # a session's context closes unused this long
    session_max_s: float = Field(3600, gt=0)  # and at this age whatever its use
    idle_close_s: float = Field(300, gt=0)  # the browser process ends with no session this long
    max_snapshot_chars: int = Field(20_000, ge=1000)
    # DANGEROUS: addresses the guard lets the page reach though private (tests serve pages
    # on loopback); empty = only public addresses
    allowed_networks: tuple[str, ...] = ()

    @field_validator("allowed_networks")
    @classmethod
    def _networks(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        return _ip_networks(value)


class VisionToolConfig(_ToolSection):
    model: str = ""  # empty = model.name
    base_url: str = ""  # empty = model.base_url
    api_key: str = ""  # empty = model.api_key when base_url is empty too
    max_bytes: int = Field(10 * 1024 * 1024, ge=1024)


class DelegateToolConfig(_ToolSection):
    max_depth: int = Field(1, ge=1, le=5)
    max_iterations: int = Field(10, ge=1)


class ExecuteCodeToolConfig(_ToolSection):
    timeout_s: float = Field(300, gt=0)
    max_calls: int = Field(50, ge=1)
    max_stdout_chars: int = Field(50_000, ge=100)
    spill_max_bytes: int = Field(10 * 1024 * 1024, ge=1024)
    memory_mb: int = Field(1024, ge=64)
    max_processes: int = Field(64, ge=1)
    open_files: int = Field(256, ge=16)


_files = "tools.files:make_"
_hindsight = "tools.hindsight:make_"
_skills = "tools.skills:make_"

TERMINAL = ToolSpec(
    "terminal",
    "tools.terminal:make_terminal",
    "terminal",
    TerminalToolConfig,
    needs=frozenset({"approvals"}),
)
READ_FILE = ToolSpec("read_file", _files + "read_file")
WRITE_FILE = ToolSpec("write_file", _files + "write_file")
PATCH = ToolSpec("patch", "tools.patch:make_patch")
SEARCH_FILES = ToolSpec("search_files", "tools.search_files:make_search_files")
WEB_SEARCH = ToolSpec("web_search", "tools.web:make_web_search", "web", WebToolConfig)
WEB_EXTRACT = ToolSpec("web_extract", "tools.web:make_web_extract", "web", WebToolConfig)
VISION_ANALYZE = ToolSpec(
    "vision_analyze",
    "tools.vision:make_vision",
    "vision",
    VisionToolConfig,
    secrets=("api_key",),
    needs=frozenset({"attachments", "vision"}),
)
MEMORY = ToolSpec("memory", "tools.memory:make_memory", needs=frozenset({"memory"}))
SESSION_SEARCH = ToolSpec(
    "session_search", "tools.recall:make_session_search", needs=frozenset({"history"})
)
_remembers = frozenset({"memory"})
HINDSIGHT_RETAIN = ToolSpec("hindsight_retain", _hindsight + "retain", needs=_remembers)
HINDSIGHT_RECALL = ToolSpec("hindsight_recall", _hindsight + "recall", needs=_remembers)
HINDSIGHT_REFLECT = ToolSpec("hindsight_reflect", _hindsight + "reflect", needs=_remembers)
HINDSIGHT_FORGET = ToolSpec("hindsight_forget", _hindsight + "forget", needs=_remembers)
SKILLS_LIST = ToolSpec("skills_list", _skills + "skills_list")
SKILL_VIEW = ToolSpec("skill_view", _skills + "skill_view")
SKILL_MANAGE = ToolSpec("skill_manage", _skills + "skill_manage")
DELEGATE_TASK = ToolSpec(
    "delegate_task",
    "tools.delegate:make_delegate",
    "delegate",
    DelegateToolConfig,
    needs=frozenset({"delegation"}),
)
# built after the others and given them: a script calls the session's own tools
EXECUTE_CODE = ToolSpec(
    "execute_code",
    "tools.execute_code:make_execute_code",
    "execute_code",
    ExecuteCodeToolConfig,
    needs=frozenset({"approvals", "tools"}),
)
_browser = "tools.browser:make_"
_browses = frozenset({"browser"})


def _browser_spec(name: str) -> ToolSpec:
    return ToolSpec(name, _browser + name, "browser", BrowserToolConfig, needs=_browses)


BROWSER_NAVIGATE = _browser_spec("browser_navigate")
BROWSER_SNAPSHOT = _browser_spec("browser_snapshot")
BROWSER_CLICK = _browser_spec("browser_click")
BROWSER_TYPE = _browser_spec("browser_type")
BROWSER_PRESS = _browser_spec("browser_press")
BROWSER_SCROLL = _browser_spec("browser_scroll")
BROWSER_BACK = _browser_spec("browser_back")
BROWSER_SCREENSHOT = _browser_spec("browser_screenshot")
BROWSER_CLOSE = _browser_spec("browser_close")
_jobs = frozenset({"jobs"})
CRONJOB = ToolSpec("cronjob", "tools.cronjob:make_cronjob", needs=_jobs)
SEND_FILE = ToolSpec("send_file", "tools.send_file:make_send_file", needs=frozenset({"send_files"}))
# the reference's name for it
CRONJOB_MANAGE = ToolSpec("cronjob_manage", "tools.cronjob:make_cronjob_manage", needs=_jobs)
