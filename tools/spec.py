"""What a tool module declares (`ToolSpec`): its name, its factory, its settings section and
the host services it uses. Specs are registered under the ``hermes_gateway.tools`` entry point
group, so adding a tool touches no module of the gateway (`tools.catalog` finds them).
`installed_specs` reads such a group, for tools and platforms alike."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from importlib.metadata import EntryPoint
from typing import Protocol, TypeVar

from pydantic import BaseModel

from tools.host import HOST_NEEDS

ENTRY_POINT_GROUP = "hermes_gateway.tools"


@dataclass(frozen=True, slots=True)
class ToolSpec:
    """One tool, as the module that provides it declares it.

    ``factory`` is a ``"module:function"`` string, imported only when the tool is enabled: the
    spec must live where importing it is cheap (the config validates every installed tool's
    section at start, enabled or not).
    """

    name: str  # the tool's name for the model and in `tools.enabled`
    # "module:function": called with `tools.catalog.ToolSettings` (and the session's other
    # tools as a `ToolRegistry` when `needs` has "tools"); returns the `Tool`
    factory: str
    # the key of its settings under `tools:`; tools may share one (web_search, web_extract)
    section: str | None = None
    settings: type[BaseModel] | None = None  # that section's model (frozen, extra forbidden)
    secrets: tuple[str, ...] = ()  # keys of the section the log redactor must hide
    # the `ToolHost` services its calls may use; the registry hands it no others
    needs: frozenset[str] = frozenset()  # keys of `tools.host.HOST_NEEDS`

    def __post_init__(self) -> None:
        if (self.section is None) != (self.settings is None):
            raise ValueError(f"tool {self.name}: section and settings come together")
        unknown = sorted(set(self.needs) - set(HOST_NEEDS))
        if unknown:
            raise ValueError(f"tool {self.name}: unknown needs {unknown} (of {sorted(HOST_NEEDS)})")


class Named(Protocol):
    @property
    def name(self) -> str: ...


S = TypeVar("S", bound=Named)


def installed_specs(points: Iterable[EntryPoint], group: str, kind: type[S], what: str) -> list[S]:
    """The spec of each of ``points`` (the entry points of ``group``), once each (``what``:
    "tool", "platform", for the errors). Raises `RuntimeError` when one cannot load, is not a
    ``kind`` named as its entry point, or none is installed."""
    specs: dict[str, S] = {}
    for point in points:
        try:
            spec = point.load()
        except Exception as exc:  # an installed plugin that cannot load is a broken install
            raise RuntimeError(
                f"{what} {point.name} ({point.value}) cannot be loaded: {exc}"
            ) from exc
        if not isinstance(spec, kind) or spec.name != point.name:
            raise RuntimeError(
                f"entry point {point.name} = {point.value} is not the {kind.__name__} named "
                f"{point.name!r}"
            )
        specs.setdefault(spec.name, spec)  # the same distribution seen twice on the path
    if not specs:
        raise RuntimeError(
            f"no {what} is installed (entry point group {group}): "
            "reinstall the package, e.g. pip install -e ."
        )
    return list(specs.values())
