"""What a platform package declares (`PlatformSpec`) and how the gateway finds the installed
ones: each package registers its spec under the ``hermes_gateway.platforms`` entry point group,
so adding a platform touches no module of the gateway."""

from __future__ import annotations

import functools
import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from importlib.metadata import entry_points
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, field_validator

from tools.spec import installed_specs

if TYPE_CHECKING:
    import httpx

ENTRY_POINT_GROUP = "hermes_gateway.platforms"
MEDIA_MAX_BYTES = 20 * 1024 * 1024  # largest attachment a platform adapter downloads


class PlatformSection(BaseModel):
    """The keys every chat platform's ``platforms.<name>:`` section has: who may talk to the
    bot. The core's admission reads them; a section that is not a `PlatformSection` (the local
    API's) has no access rules, and its platform must authenticate callers itself."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    enabled: bool = False
    allowed_users: tuple[str, ...] = ()
    allow_all: bool = False
    require_mention: bool = True
    pairing: bool = False  # unknown DM users get a code an operator approves
    typing: bool = True  # show "typing..." (or the platform's equivalent) while working
    streaming: bool = False  # live preview of the answer by message edits

    @field_validator("allowed_users", mode="before")
    @classmethod
    def _ids_as_strings(cls, value: Any) -> Any:
        # ids arrive as numbers or strings in YAML; compare them as strings everywhere
        if isinstance(value, list | tuple):
            return tuple(str(v).strip() for v in value)
        return value


@dataclass(frozen=True, slots=True)
class Capabilities:
    """What the platform can do, asked instead of its name."""

    can_edit: bool = False  # edit a sent message (live preview)
    can_react: bool = False  # put a reaction on the user's message
    can_ask_approval: bool = True  # a channel back to the user for a yes/no question
    has_threads: bool = False  # replies may go to a thread of the chat
    # speak in a chat unasked (a scheduled job's answer, a welcome); a platform that cannot
    # answers only the open request that asked, on the instance that took it (the local API)
    can_push: bool = True
    # one that cannot push may still keep what is said unasked for its chat: in the chat's
    # history, and on a feed its client listens to (the local API's `GET /v1/events`)
    keeps_unasked: bool = False


@dataclass(frozen=True, slots=True)
class Limits:
    message_chars: int | None = None  # the longest message the platform takes; None = no limit
    # the largest file it takes from a bot (`send_file`); None: it takes no files (yet)
    upload_bytes: int | None = None


def megabytes(size: int) -> str:
    """A size for a person to read, against an upload limit: "51.0 MB"."""
    return f"{size / (1024 * 1024):.1f} MB"


def _no_secrets(section: Any) -> tuple[str, ...]:
    return ()


def _no_problems(section: Any) -> list[tuple[str, str]]:
    return []


@dataclass(frozen=True, slots=True)
class PlatformSpec:
    """One platform, as its package declares it.

    ``adapter`` and ``probe`` are ``"module:attribute"`` strings, imported only when the
    platform is enabled: the spec itself must not import the platform's SDK.
    """

    name: str  # the key under ``platforms:`` and in session keys
    section: type[BaseModel]  # its config section model (frozen, extra keys forbidden)
    adapter: str  # "module:Class", called with the `AdapterHost`
    # section key -> environment variable that gives it when the file does not (None: none)
    secrets: Mapping[str, str | None] = field(default_factory=dict)
    # the secret keys an enabled section must have, given the section (its mode may choose)
    required: Callable[[Any], tuple[str, ...]] = _no_secrets
    # the section's secret values beyond those keys (one per webhook route, say): the log
    # redactor hides them like every other secret of the config
    secret_values: Callable[[Any], tuple[str, ...]] = _no_secrets
    # further problems of an enabled section: (key in the section, reason)
    problems: Callable[[Any], list[tuple[str, str]]] = _no_problems
    # "module:function" for `hermes doctor`: (section, httpx.Client) -> detail, raising
    # `ProbeFailed` (an unreachable platform's httpx.HTTPError is reported by the doctor)
    probe: str | None = None
    menu: bool = False  # shows the gateway's chat commands in a platform menu
    capabilities: Capabilities = Capabilities()
    # the platform's credentials as they show in text (a log line, a URL, a payload): every
    # log redacts what matches, whether or not the platform is enabled
    token_patterns: tuple[str, ...] = ()
    limits: Limits = Limits()
    order: int = 100  # where it comes in listings, checks and start order (then by name)


class ProbeFailed(Exception):
    """A doctor probe's verdict: the platform answered, and said no."""


def load_ref(ref: str) -> Any:
    """Import ``"module:attribute"`` (blocking: an SDK import takes a few hundred ms)."""
    module_name, _, attribute = ref.partition(":")
    return getattr(importlib.import_module(module_name), attribute)


@functools.cache
def platform_specs() -> tuple[PlatformSpec, ...]:
    """Every installed platform's spec, by `PlatformSpec.order` then name; loaded once."""
    points = entry_points(group=ENTRY_POINT_GROUP)
    specs = installed_specs(points, ENTRY_POINT_GROUP, PlatformSpec, "platform")
    return tuple(sorted(specs, key=lambda s: (s.order, s.name)))


def platform_spec(name: str) -> PlatformSpec | None:
    return next((s for s in platform_specs() if s.name == name), None)


def capabilities(name: str) -> Capabilities:
    """The platform's capabilities; the defaults for a name no spec has."""
    spec = platform_spec(name)
    return spec.capabilities if spec is not None else Capabilities()


def token_verdict(response: httpx.Response, who: Callable[[dict[str, Any]], str | None]) -> str:
    """A probe's verdict on a token check: "token valid: <who>", or `ProbeFailed` with the
    platform's reason when it is not a 200 that ``who`` can name."""
    try:
        data = response.json()
    except ValueError:
        data = {}
    name = who(data) if response.status_code == 200 and isinstance(data, dict) else None
    if name is None:
        data = data if isinstance(data, dict) else {}
        reason = data.get("description") or data.get("error") or data.get("message")
        raise ProbeFailed(f"token rejected (HTTP {response.status_code}: {reason})")
    return f"token valid: {name}"
